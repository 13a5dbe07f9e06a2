package hotspot

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
)

// DebugLayout is where a JVM build keeps what maps code back to source:
// the line number table after a method's bytecodes, and a compiled
// method's PcDescs and scopes (the Java frames, inlined ones included, each
// call site or safepoint of its code runs).
type DebugLayout struct {
	// ConstMethod::_code_size (u2) and _flags (u2; u4 from JDK 21), and
	// the flag saying a line number table follows the bytecodes.
	ConstMethodCodeSize, ConstMethodFlags uint64
	FlagsWidth                            int
	HasLineTable                          uint32
	// Excluded is the UNSIGNED5 excluded bytes of the compressed streams:
	// 1 from JDK 21 (told by its ConstMethodFlags), 0 before.
	Excluded uint32
	// PcDesc: its size, _pc_offset and _scope_decode_offset.
	PcDescSize, PcOffset, PcScope uint64
	// Where an nmethod's PcDescs, scopes and metadata (the Method*s its
	// scopes index) are. Before JDK 23 offsets from the nmethod (PcDescs
	// end at _dependencies_offset; metadata from _metadata_offset to the
	// scopes, whose start is CompiledMethod::_scopes_data_begin); from JDK
	// 23 PcDescs and scopes are in the nmethod's immutable data (offsets
	// from nmethod::_immutable_data; the scopes follow the PcDescs) and
	// the metadata in its mutable data, after the relocations.
	// nmethod::_compile_id tells a compilation from a later one at the
	// same address (DebugCache).
	CompileID                                  uint64
	Immutable                                  bool
	ScopesPcs, ScopesData, PcsEnd, MetadataAt  uint64
	ImmutableData, MutableData, RelocationSize uint64
}

// NewDebugLayout derives the DebugLayout of vm's JVM, or names what is
// missing.
func NewDebugLayout(vm *VMStructs) (*DebugLayout, error) {
	var missing []string
	offset := func(typ, field string) uint64 {
		f, ok := vm.FieldOf(typ, field)
		if !ok || f.Static {
			missing = append(missing, typ+"::"+field)
		}
		return f.Offset
	}
	d := &DebugLayout{
		ConstMethodCodeSize: offset("ConstMethod", "_code_size"),
		PcOffset:            offset("PcDesc", "_pc_offset"),
		PcScope:             offset("PcDesc", "_scope_decode_offset"),
		PcDescSize:          vm.Types["PcDesc"].Size,
		ScopesPcs:           offset("nmethod", "_scopes_pcs_offset"),
		CompileID:           offset("nmethod", "_compile_id"),
	}
	if f, ok := vm.FieldOf("ConstMethod", "_flags._flags"); ok {
		d.ConstMethodFlags, d.FlagsWidth, d.Excluded = f.Offset, 4, 1
		d.HasLineTable = uint32(vm.Ints["ConstMethodFlags::_misc_has_linenumber_table"])
	} else {
		d.ConstMethodFlags, d.FlagsWidth = offset("ConstMethod", "_flags"), 2
		d.HasLineTable = uint32(vm.Ints["ConstMethod::_has_linenumber_table"])
	}
	if d.HasLineTable == 0 {
		missing = append(missing, "the has_linenumber_table flag")
	}
	if _, ok := vm.FieldOf("nmethod", "_immutable_data"); ok {
		d.Immutable = true
		d.ImmutableData = offset("nmethod", "_immutable_data")
		d.ScopesData = offset("nmethod", "_scopes_data_offset")
		d.MutableData = offset("CodeBlob", "_mutable_data")
		d.RelocationSize = offset("CodeBlob", "_relocation_size")
	} else {
		d.ScopesData = offset("CompiledMethod", "_scopes_data_begin")
		d.PcsEnd = offset("nmethod", "_dependencies_offset")
		d.MetadataAt = offset("nmethod", "_metadata_offset")
	}
	if d.PcDescSize == 0 {
		missing = append(missing, "sizeof PcDesc")
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: %s", ErrIncomplete, strings.Join(missing, ", "))
	}
	return d, nil
}

// stream reads HotSpot's compressed streams (CompressedReadStream): ints
// in UNSIGNED5, 1 to 5 bytes, each below 192 ends the number; from JDK 21
// the byte 0 is excluded (every byte is one more, below 192 still ends).
type stream struct {
	b    []byte
	pos  int
	last int    // where the last line pair began (pairsEnd)
	x    uint32 // excluded bytes: 0, or 1 from JDK 21
	err  error
}

var errStreamEnd = errors.New("compressed stream ends early")

func (s *stream) byte() byte {
	if s.pos >= len(s.b) {
		s.err = errStreamEnd
		return 0
	}
	c := s.b[s.pos]
	s.pos++
	return c
}

// uint reads one UNSIGNED5 number.
func (s *stream) uint() uint32 {
	const lgH, low = 6, 192
	b := uint32(s.byte())
	sum := b - s.x
	if b < low {
		return sum
	}
	shift := uint(lgH)
	for i := 1; i <= 4; i++ {
		b = uint32(s.byte())
		sum += (b - s.x) << shift
		if b < low || i == 4 {
			break
		}
		shift += lgH
	}
	return sum
}

// signed reads a sign-folded number (low bit the sign).
func (s *stream) signed() int32 {
	v := s.uint()
	return int32(v>>1) ^ -int32(v&1)
}

// Bounds on what a method's or a compiled method's debug data may make the
// namer read.
const (
	maxLineTable = 64 << 10
	maxPcDescs   = 1 << 16
	maxScopes    = 1 << 20 // bytes of one nmethod's scopes data
	maxInlining  = 64      // scopes of one pc
)

// LineOf returns the source line of bytecode index bci in the Method at
// method (0: the method has no line table).
func LineOf(mem io.ReaderAt, l *Layout, d *DebugLayout, method uint64, bci int, cache *LineCache) (int64, error) {
	r := &memReader{mem: mem}
	cm, err := r.u64(method + l.MethodConst)
	if err != nil {
		return 0, err
	}
	b, err := r.bytes(cm+d.ConstMethodFlags, d.FlagsWidth)
	if err != nil {
		return 0, err
	}
	flags := uint32(binary.LittleEndian.Uint16(b))
	if d.FlagsWidth == 4 {
		flags = binary.LittleEndian.Uint32(b)
	}
	if flags&d.HasLineTable == 0 {
		return 0, nil
	}
	if b, err = r.bytes(cm+d.ConstMethodCodeSize, 2); err != nil {
		return 0, err
	}
	codeSize := binary.LittleEndian.Uint16(b)
	key := lineKey{cm, codeSize}
	if table, ok := cache.get(key); ok {
		return lineAt(table, bci, d.Excluded), nil
	}
	table, err := readLineTable(r, cm+l.ConstMethodSize+uint64(codeSize), d.Excluded)
	if err != nil {
		return 0, err
	}
	cache.put(key, table)
	return lineAt(table, bci, d.Excluded), nil
}

// readLineTable reads the compressed line table at addr: it ends with a 0
// byte, so it is read in pieces until then, each piece parsed once.
func readLineTable(r *memReader, addr uint64, x uint32) ([]byte, error) {
	var buf []byte
	s := &stream{x: x}
	for len(buf) < maxLineTable {
		piece, err := r.bytes(addr+uint64(len(buf)), 256)
		if err != nil && len(buf) == 0 {
			return nil, fmt.Errorf("line table: %w", err)
		}
		if err != nil {
			break
		}
		buf = append(buf, piece...)
		if s.b = buf; pairsEnd(s) {
			return buf[:s.pos], nil
		}
		if s.err != nil {
			s.pos, s.err = s.last, nil // a pair cut at the piece's end: parse it again
		}
	}
	return buf, nil
}

// pairsEnd parses s's line pairs from where it is; true once the end byte
// was read (s.pos after it). s.last is the start of the last pair.
func pairsEnd(s *stream) bool {
	for s.err == nil {
		s.last = s.pos
		switch s.byte() {
		case 0:
			return s.err == nil
		case 0xff:
			s.signed()
			s.signed()
		}
	}
	return false
}

// LineCache keeps the line tables read lately, by ConstMethod address and
// bytecode size (a method whose memory another one reuses is read anew),
// within maxCachedLineBytes. Not safe for concurrent use; a nil LineCache
// reads every time.
type LineCache struct {
	tables map[lineKey][]byte
	bytes  int
}

type lineKey struct {
	constMethod uint64
	codeSize    uint16
}

// maxCachedLineBytes bounds the line tables a LineCache holds.
const maxCachedLineBytes = 4 << 20

func (c *LineCache) get(k lineKey) ([]byte, bool) {
	if c == nil {
		return nil, false
	}
	t, ok := c.tables[k]
	return t, ok
}

func (c *LineCache) put(k lineKey, table []byte) {
	if c == nil {
		return
	}
	if c.tables == nil || c.bytes+len(table) > maxCachedLineBytes {
		c.tables, c.bytes = map[lineKey][]byte{}, 0
	}
	c.tables[k] = table
	c.bytes += len(table)
}

// lineAt returns the line of bci in a compressed line number table: the
// line of the pair with bci, else of the nearest pair before it.
func lineAt(b []byte, bci int, x uint32) int64 {
	s := &stream{b: b, x: x}
	var pbci, line, bestBCI, best int64 = 0, 0, -1, 0
	for s.err == nil {
		c := s.byte()
		switch {
		case c == 0 || s.err != nil:
			return best
		case c == 0xff:
			pbci += int64(s.signed())
			line += int64(s.signed())
		default:
			pbci += int64(c >> 3)
			line += int64(c & 7)
		}
		if pbci == int64(bci) {
			return line
		}
		if pbci < int64(bci) && pbci >= bestBCI {
			bestBCI, best = pbci, line
		}
	}
	return best
}

// scope is one Java frame of compiled code: the method and bytecode index.
type scope struct {
	method uint64
	bci    int
}

// Scopes returns the Java frames compiled code runs at pc, in the nmethod
// at blob whose instructions start at code: the innermost (inlined) first,
// the nmethod's own method last. pc is the lookup address (a return
// address less one): its frames are those of the first PcDesc after it.
func Scopes(mem io.ReaderAt, d *DebugLayout, blob, code, pc uint64, cache *DebugCache) ([]scope, error) {
	r := &memReader{mem: mem}
	nd, err := cache.get(r, d, blob)
	if err != nil {
		return nil, err
	}
	descs, data, metadata := nd.descs, nd.data, nd.metadata
	n := uint64(len(descs)) / d.PcDescSize
	if pc < code {
		return nil, fmt.Errorf("pc %#x before the code at %#x", pc, code)
	}
	at := func(i int) (pcOff, scopeOff int32) {
		e := descs[uint64(i)*d.PcDescSize:]
		return int32(binary.LittleEndian.Uint32(e[d.PcOffset:])), int32(binary.LittleEndian.Uint32(e[d.PcScope:]))
	}
	off := int64(pc - code)
	i := sort.Search(int(n), func(i int) bool { p, _ := at(i); return int64(p) > off })
	if i == int(n) {
		return nil, fmt.Errorf("no PcDesc after pc offset %d", off)
	}
	_, decode := at(i)
	var out []scope
	for range maxInlining {
		if decode <= 0 || decode >= maxScopes {
			break // serialized null: the outermost scope was read
		}
		b, err := r.bytes(data+uint64(decode), 16)
		if err != nil {
			return nil, fmt.Errorf("scope at %d: %w", decode, err)
		}
		s := &stream{b: b, x: d.Excluded}
		sender, index, bci := int32(s.uint()), s.uint(), int(s.uint())-1
		if s.err != nil || index == 0 {
			return nil, fmt.Errorf("scope at %d: bad encoding", decode)
		}
		method, err := r.u64(metadata + 8*uint64(index-1))
		if err != nil {
			return nil, fmt.Errorf("scope's method %d: %w", index, err)
		}
		out = append(out, scope{method, bci})
		decode = sender
	}
	if len(out) == 0 {
		return nil, errors.New("pc has no scope")
	}
	return out, nil
}

// nmethodDebug is what Scopes reads of one nmethod whatever the pc: its
// PcDescs, and where its scopes and metadata are.
type nmethodDebug struct {
	descs          []byte
	data, metadata uint64
}

// DebugCache keeps the PcDescs of the nmethods named lately (a large one
// has thousands, read once instead of per pc), by nmethod address and
// compile id: a later compilation at the same address is read anew. Not
// safe for concurrent use; a nil DebugCache reads every time.
type DebugCache struct {
	entries map[debugKey]*nmethodDebug
	bytes   int
}

type debugKey struct {
	blob      uint64
	compileID int32
}

// maxCachedDescBytes bounds the PcDescs a DebugCache holds.
const maxCachedDescBytes = 4 << 20

func (c *DebugCache) get(r *memReader, d *DebugLayout, blob uint64) (*nmethodDebug, error) {
	var key debugKey
	if c != nil {
		b, err := r.bytes(blob+d.CompileID, 4)
		if err != nil {
			return nil, err
		}
		key = debugKey{blob, int32(binary.LittleEndian.Uint32(b))}
		if nd, ok := c.entries[key]; ok {
			return nd, nil
		}
	}
	pcs, pcsEnd, data, metadata, err := d.regions(r, blob)
	if err != nil {
		return nil, err
	}
	n := (pcsEnd - pcs) / d.PcDescSize
	if pcsEnd < pcs || n == 0 || n > maxPcDescs {
		return nil, fmt.Errorf("%d PcDescs at %#x", int64(pcsEnd-pcs)/int64(d.PcDescSize), pcs)
	}
	descs, err := r.bytes(pcs, int(n*d.PcDescSize))
	if err != nil {
		return nil, err
	}
	nd := &nmethodDebug{descs, data, metadata}
	if c != nil {
		if c.entries == nil || c.bytes+len(descs) > maxCachedDescBytes {
			c.entries, c.bytes = map[debugKey]*nmethodDebug{}, 0
		}
		c.entries[key] = nd
		c.bytes += len(descs)
	}
	return nd, nil
}

// regions returns where the nmethod at blob keeps its PcDescs, scopes and
// metadata.
func (d *DebugLayout) regions(r *memReader, blob uint64) (pcs, pcsEnd, data, metadata uint64, err error) {
	i32 := func(addr uint64) uint64 {
		b, e := r.bytes(addr, 4)
		if e != nil {
			err = e
			return 0
		}
		return uint64(int64(int32(binary.LittleEndian.Uint32(b))))
	}
	u64 := func(addr uint64) uint64 {
		v, e := r.u64(addr)
		if e != nil {
			err = e
		}
		return v
	}
	if d.Immutable {
		base := u64(blob + d.ImmutableData)
		pcs, data = base+i32(blob+d.ScopesPcs), base+i32(blob+d.ScopesData)
		pcsEnd = data
		metadata = u64(blob+d.MutableData) + i32(blob+d.RelocationSize)
	} else {
		pcs, pcsEnd = blob+i32(blob+d.ScopesPcs), blob+i32(blob+d.PcsEnd)
		data = u64(blob + d.ScopesData)
		metadata = blob + i32(blob+d.MetadataAt)
	}
	return pcs, pcsEnd, data, metadata, err
}
