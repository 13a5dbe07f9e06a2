package symbolize

import (
	"bytes"
	"debug/elf"
	"debug/gosym"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
)

// goFrame is one (possibly inlined) Go function at a pc.
type goFrame struct {
	function string
	file     string
	line     int64
	inlined  bool
}

// pclntab magic numbers (the first 4 bytes of .gopclntab).
const (
	go120Magic = 0xfffffff1 // Go 1.20 and later: the layout read directly below
)

// _func field offsets of the Go 1.20+ layout (runtime/runtime2.go).
const (
	funcEntryOff   = 0
	funcNameOff    = 4
	funcPcfile     = 20
	funcPcln       = 24
	funcNpcdata    = 28
	funcCuOffset   = 32
	funcNfuncdata  = 43
	funcHeaderSize = 44

	pcdataInlTreeIndex = 2
	funcdataInlTree    = 3
	inlinedCallSize    = 16
	maxInlineDepth     = 64
)

// goTable resolves pcs of a Go binary: function, file, line and the inline
// tree, read directly from the Go 1.20+ .gopclntab layout. Older layouts go
// through debug/gosym, without inlined frames.
type goTable struct {
	bo          binary.ByteOrder
	quantum     uint64
	nfunc       int
	textStart   uint64
	funcnametab []byte
	cutab       []byte
	filetab     []byte
	pctab       []byte
	functab     []byte // functab followed by the _func structs (pclnOffset)
	gofunc      []byte // go:func.* to the end of its section; nil when unknown
	legacy      *gosym.Table
}

// errNoPclntab is returned by newGoTable for a file without a pclntab.
var errNoPclntab = errors.New("no pclntab")

// newGoTable reads the pclntab of Go binary f, in place in the file data.
// symtab is f's .symtab (nil when stripped), used to find go:func.*,
// runtime.text and runtime.pclntab.
func newGoTable(f *elf.File, data []byte, symtab *rawSymbols) (*goTable, error) {
	value := func(name string) (uint64, bool) {
		if symtab == nil {
			return 0, false
		}
		return symtab.find(name)
	}
	var tab []byte
	if s := f.Section(".gopclntab"); s != nil && s.Type != elf.SHT_NOBITS {
		b, ok := sectionBytes(data, s)
		if !ok {
			return nil, errors.New(".gopclntab out of bounds")
		}
		tab = b
	} else if start, ok := value("runtime.pclntab"); ok {
		end, _ := value("runtime.epclntab")
		tab = vaddrBytes(f, data, start, end)
	}
	if len(tab) < 8 {
		return nil, errNoPclntab
	}
	textStart := uint64(0)
	if s := f.Section(".text"); s != nil {
		textStart = s.Addr
	}
	if v, ok := value("runtime.text"); ok {
		textStart = v
	}
	t, err := parsePclntab(tab, textStart)
	if err != nil {
		return nil, err
	}
	if t.legacy == nil {
		if v, ok := value("go:func.*"); ok {
			t.gofunc = vaddrBytes(f, data, v, 0)
		}
	}
	return t, nil
}

// parsePclntab reads the header of a pclntab. textStart is used when the
// header does not carry it (PIE binaries leave it to a relocation).
func parsePclntab(data []byte, textStart uint64) (*goTable, error) {
	if len(data) < 8 {
		return nil, errors.New("short pclntab")
	}
	bo := binary.ByteOrder(binary.LittleEndian)
	if binary.BigEndian.Uint32(data) == go120Magic {
		bo = binary.BigEndian
	}
	if bo.Uint32(data) != go120Magic {
		return parseLegacyPclntab(data, textStart)
	}
	ptrSize := int(data[7])
	if ptrSize != 4 && ptrSize != 8 || data[6] == 0 {
		return nil, fmt.Errorf("bad pclntab header")
	}
	word := func(i int) (uint64, bool) {
		off := 8 + i*ptrSize
		if off+ptrSize > len(data) {
			return 0, false
		}
		if ptrSize == 4 {
			return uint64(bo.Uint32(data[off:])), true
		}
		return bo.Uint64(data[off:]), true
	}
	var hdr [8]uint64 // nfunc, nfiles, textStart, funcname, cu, filetab, pctab, pcln
	for i := range hdr {
		v, ok := word(i)
		if !ok {
			return nil, errors.New("short pclntab header")
		}
		hdr[i] = v
	}
	if hdr[2] != 0 {
		textStart = hdr[2]
	}
	sub := func(off uint64) []byte {
		if off > uint64(len(data)) {
			return nil
		}
		return data[off:]
	}
	t := &goTable{
		bo:          bo,
		quantum:     uint64(data[6]),
		nfunc:       int(min(hdr[0], uint64(len(data)))),
		textStart:   textStart,
		funcnametab: sub(hdr[3]),
		cutab:       sub(hdr[4]),
		filetab:     sub(hdr[5]),
		pctab:       sub(hdr[6]),
		functab:     sub(hdr[7]),
	}
	if (t.nfunc+1)*8 > len(t.functab) {
		return nil, errors.New("functab out of bounds")
	}
	return t, nil
}

// parseLegacyPclntab reads a pre-Go 1.20 pclntab through debug/gosym,
// after checking the header: gosym trusts the function count and would
// allocate whatever a corrupt header asks for.
func parseLegacyPclntab(data []byte, textStart uint64) (t *goTable, err error) {
	if len(data) < 16 {
		return nil, errors.New("short pclntab")
	}
	ptrSize := int(data[7])
	if ptrSize != 4 && ptrSize != 8 || data[4] != 0 || data[5] != 0 {
		return nil, errors.New("bad pclntab header")
	}
	// gosym takes the byte order from the magic: a big-endian one reads
	// the count big-endian.
	var order binary.ByteOrder = binary.LittleEndian
	if m := binary.BigEndian.Uint32(data); m == 0xfffffffb || m == 0xfffffffa || m == 0xfffffff0 || m == 0xfffffff1 {
		order = binary.BigEndian
	}
	var nfunc uint64
	if ptrSize == 4 {
		nfunc = uint64(order.Uint32(data[8:]))
	} else {
		nfunc = order.Uint64(data[8:])
	}
	if nfunc > uint64(len(data)/8) { // a functab entry takes at least 8 bytes
		return nil, errors.New("pclntab function count out of bounds")
	}
	defer func() {
		if r := recover(); r != nil {
			t, err = nil, fmt.Errorf("malformed pclntab: %v", r)
		}
	}()
	tab, err := gosym.NewTable(nil, gosym.NewLineTable(data, textStart))
	if err != nil {
		return nil, err
	}
	return &goTable{legacy: tab}, nil
}

// vaddrBytes returns the file bytes, in place in data, from virtual address
// start to end (or to the end of the containing section when end is 0).
func vaddrBytes(f *elf.File, data []byte, start, end uint64) []byte {
	for _, s := range f.Sections {
		if s.Type == elf.SHT_NOBITS || s.Flags&elf.SHF_ALLOC == 0 || start < s.Addr || start >= s.Addr+s.Size {
			continue
		}
		b, ok := sectionBytes(data, s)
		if !ok {
			return nil
		}
		stop := s.Addr + s.Size
		if end > start && end < stop {
			stop = end
		}
		return b[start-s.Addr : stop-s.Addr]
	}
	return nil
}

func (t *goTable) u32(b []byte, off uint64) (uint32, bool) {
	if off+4 > uint64(len(b)) || off+4 < off {
		return 0, false
	}
	return t.bo.Uint32(b[off:]), true
}

func cstring(b []byte, off uint64) string {
	if off >= uint64(len(b)) {
		return ""
	}
	b = b[off:]
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// lookup returns the frames at pc, innermost (inlined) first, or nil when pc
// is outside every Go function.
func (t *goTable) lookup(pc uint64) []goFrame {
	if t.legacy != nil {
		file, line, fn := t.legacy.PCToLine(pc)
		if fn == nil {
			return nil
		}
		return []goFrame{{function: fn.Name, file: file, line: int64(line)}}
	}
	fn, ok := t.findFunc(pc)
	if !ok {
		return nil
	}
	entry := t.textStart + uint64(t.bo.Uint32(fn[funcEntryOff:]))
	name := cstring(t.funcnametab, uint64(t.bo.Uint32(fn[funcNameOff:])))
	inlPcdata, inlTree := t.inlineData(fn)
	var frames []goFrame
	for range maxInlineDepth {
		file, line := t.fileLine(fn, entry, pc)
		idx := int32(-1)
		if inlTree != nil {
			idx = t.pcvalue(inlPcdata, entry, pc)
		}
		if idx < 0 {
			return append(frames, goFrame{function: name, file: file, line: line})
		}
		call := uint64(idx) * inlinedCallSize
		nameOff, ok1 := t.u32(inlTree, call+4)
		parentPc, ok2 := t.u32(inlTree, call+8)
		if !ok1 || !ok2 {
			return append(frames, goFrame{function: name, file: file, line: line})
		}
		frames = append(frames, goFrame{function: cstring(t.funcnametab, uint64(nameOff)), file: file, line: line, inlined: true})
		pc = entry + uint64(int64(int32(parentPc)))
	}
	return append(frames, goFrame{function: name})
}

// functions calls yield with the name, entry and end of each function of
// the table.
func (t *goTable) functions(yield func(name string, entry, end uint64)) {
	if t.legacy != nil {
		for _, fn := range t.legacy.Funcs {
			yield(fn.Name, fn.Entry, fn.End)
		}
		return
	}
	for i := range t.nfunc {
		entry := uint64(t.bo.Uint32(t.functab[i*8:]))
		end := uint64(t.bo.Uint32(t.functab[(i+1)*8:]))
		funcOff := uint64(t.bo.Uint32(t.functab[i*8+4:]))
		nameOff, ok := t.u32(t.functab, funcOff+funcNameOff)
		if !ok || end <= entry {
			continue
		}
		yield(cstring(t.funcnametab, uint64(nameOff)), t.textStart+entry, t.textStart+end)
	}
}

// isEntry reports whether pc is the entry of a function of the table.
func (t *goTable) isEntry(pc uint64) bool {
	if t.legacy != nil {
		fn := t.legacy.PCToFunc(pc)
		return fn != nil && fn.Entry == pc
	}
	fn, ok := t.findFunc(pc)
	return ok && t.textStart+uint64(t.bo.Uint32(fn[funcEntryOff:])) == pc
}

// findFunc returns the _func struct of the function containing pc.
func (t *goTable) findFunc(pc uint64) ([]byte, bool) {
	if pc < t.textStart {
		return nil, false
	}
	off := pc - t.textStart
	entryAt := func(i int) uint64 { return uint64(t.bo.Uint32(t.functab[i*8:])) }
	// functab holds nfunc entries and a final end-of-text entry.
	i := sort.Search(t.nfunc, func(i int) bool { return entryAt(i) > off }) - 1
	if i < 0 || off >= entryAt(t.nfunc) {
		return nil, false
	}
	funcOff := uint64(t.bo.Uint32(t.functab[i*8+4:]))
	if funcOff+funcHeaderSize > uint64(len(t.functab)) {
		return nil, false
	}
	return t.functab[funcOff:], true
}

// inlineData returns the pctab offset of the inline tree index table and
// the inline tree of fn, or (0, nil) when fn has no inlined calls.
func (t *goTable) inlineData(fn []byte) (uint32, []byte) {
	if t.gofunc == nil {
		return 0, nil
	}
	npcdata := uint64(t.bo.Uint32(fn[funcNpcdata:]))
	nfuncdata := uint64(fn[funcNfuncdata])
	if npcdata <= pcdataInlTreeIndex || nfuncdata <= funcdataInlTree {
		return 0, nil
	}
	pcOff, ok1 := t.u32(fn, funcHeaderSize+pcdataInlTreeIndex*4)
	fdOff, ok2 := t.u32(fn, funcHeaderSize+npcdata*4+funcdataInlTree*4)
	if !ok1 || !ok2 || pcOff == 0 || fdOff == ^uint32(0) || uint64(fdOff) >= uint64(len(t.gofunc)) {
		return 0, nil
	}
	return pcOff, t.gofunc[fdOff:]
}

// fileLine returns the source position of pc in fn.
func (t *goTable) fileLine(fn []byte, entry, pc uint64) (string, int64) {
	line := t.pcvalue(t.bo.Uint32(fn[funcPcln:]), entry, pc)
	fileno := t.pcvalue(t.bo.Uint32(fn[funcPcfile:]), entry, pc)
	if fileno < 0 {
		return "", int64(max(line, 0))
	}
	cu := uint64(t.bo.Uint32(fn[funcCuOffset:]))
	fileOff, ok := t.u32(t.cutab, (cu+uint64(fileno))*4)
	if !ok || fileOff == ^uint32(0) {
		return "", int64(max(line, 0))
	}
	return cstring(t.filetab, uint64(fileOff)), int64(max(line, 0))
}

// pcvalue decodes the pc-value table at pctab offset off for a function
// starting at entry and returns the value at target, or -1.
func (t *goTable) pcvalue(off uint32, entry, target uint64) int32 {
	if off == 0 || uint64(off) >= uint64(len(t.pctab)) {
		return -1
	}
	p := t.pctab[off:]
	val := int32(-1)
	pc := entry
	for first := true; ; first = false {
		uvdelta, n := binary.Uvarint(p)
		if n <= 0 || (uvdelta == 0 && !first) {
			return -1
		}
		p = p[n:]
		v := uint32(uvdelta)
		val += int32(-(v & 1) ^ (v >> 1))
		pcdelta, n := binary.Uvarint(p)
		if n <= 0 {
			return -1
		}
		p = p[n:]
		pc += pcdelta * t.quantum
		if target < pc {
			return val
		}
	}
}
