package cfi

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// reader decodes little-endian DWARF data. Reading past the end yields zeros
// and sets bad, so that callers check once after a group of reads.
type reader struct {
	buf []byte
	off int
	bad bool
}

func (r *reader) left() int { return len(r.buf) - r.off }

func (r *reader) take(n uint64) []byte {
	if n > uint64(r.left()) {
		r.bad = true
		r.off = len(r.buf)
		return nil
	}
	b := r.buf[r.off : r.off+int(n)]
	r.off += int(n)
	return b
}

func (r *reader) u8() uint8 {
	if b := r.take(1); b != nil {
		return b[0]
	}
	return 0
}

func (r *reader) u16() uint16 {
	if b := r.take(2); b != nil {
		return binary.LittleEndian.Uint16(b)
	}
	return 0
}

func (r *reader) u32() uint32 {
	if b := r.take(4); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

func (r *reader) u64() uint64 {
	if b := r.take(8); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

// uleb reads an unsigned LEB128; bits beyond 64 are dropped.
func (r *reader) uleb() uint64 {
	var v uint64
	for shift := uint(0); ; shift += 7 {
		b := r.u8()
		if r.bad {
			return 0
		}
		if shift < 64 {
			v |= uint64(b&0x7f) << shift
		}
		if b&0x80 == 0 {
			return v
		}
	}
}

// sleb reads a signed LEB128; bits beyond 64 are dropped.
func (r *reader) sleb() int64 {
	var v int64
	for shift := uint(0); ; shift += 7 {
		b := r.u8()
		if r.bad {
			return 0
		}
		if shift < 64 {
			v |= int64(b&0x7f) << shift
		}
		if b&0x80 == 0 {
			if shift+7 < 64 && b&0x40 != 0 {
				v |= -1 << (shift + 7)
			}
			return v
		}
	}
}

// block reads a ULEB128 length and that many bytes.
func (r *reader) block() []byte { return r.take(r.uleb()) }

func (r *reader) cstring() []byte {
	i := bytes.IndexByte(r.buf[r.off:], 0)
	if i < 0 {
		r.bad = true
		r.off = len(r.buf)
		return nil
	}
	s := r.buf[r.off : r.off+i]
	r.off += i + 1
	return s
}

// Pointer encodings (DW_EH_PE_*) of .eh_frame and .eh_frame_hdr.
const (
	peAbsptr  = 0x00
	peOmit    = 0xff
	peFormat  = 0x0f
	pePCRel   = 0x10
	peDataRel = 0x30
	peAppMask = 0x70
)

// pointer reads a pointer of encoding enc. fieldAddr is the virtual address
// of the field (the base of pcrel), dataBase that of datarel (0: not
// allowed); ptrSize is the size of an absptr.
func (r *reader) pointer(enc uint8, fieldAddr, dataBase uint64, ptrSize int) (uint64, error) {
	var v uint64
	switch enc & peFormat {
	case 0x00: // absptr
		if ptrSize == 4 {
			v = uint64(r.u32())
		} else {
			v = r.u64()
		}
	case 0x01:
		v = r.uleb()
	case 0x02:
		v = uint64(r.u16())
	case 0x03:
		v = uint64(r.u32())
	case 0x04, 0x0c:
		v = r.u64()
	case 0x09:
		v = uint64(r.sleb())
	case 0x0a:
		v = uint64(int64(int16(r.u16())))
	case 0x0b:
		v = uint64(int64(int32(r.u32())))
	default:
		return 0, fmt.Errorf("pointer encoding %#x", enc)
	}
	switch {
	case enc == peOmit || enc&0x80 != 0:
		return 0, fmt.Errorf("pointer encoding %#x", enc)
	case enc&peAppMask == pePCRel:
		v += fieldAddr
	case enc&peAppMask == peDataRel && dataBase != 0:
		v += dataBase
	case enc&peAppMask != 0:
		return 0, fmt.Errorf("pointer encoding %#x", enc)
	}
	if r.bad {
		return 0, errTruncated
	}
	return v, nil
}

var (
	errTruncated   = errors.New("truncated")
	errTerminator  = errors.New("zero terminator")
	errCIEPointer  = errors.New("bad CIE pointer")
	errUnsupported = errors.New("unsupported CIE")
)

// frameSection is the content of .eh_frame or .debug_frame.
type frameSection struct {
	data  []byte
	addr  uint64 // virtual address of data[0]
	debug bool   // .debug_frame layout
}

// entry is one CIE or FDE of a frameSection.
type entry struct {
	body   reader // the bytes after the CIE id or pointer, to the entry's end
	isCIE  bool
	cieOff int // FDE: section offset of its CIE
}

// entryAt reads the entry at section offset off and returns the offset of
// the next one.
func (s *frameSection) entryAt(off int) (e entry, next int, err error) {
	r := reader{buf: s.data, off: off}
	length := uint64(r.u32())
	is64 := length == 0xffffffff
	if is64 {
		length = r.u64()
	}
	switch {
	case r.bad:
		return e, 0, errTruncated
	case length == 0:
		return e, r.off, errTerminator
	case length > uint64(r.left()):
		return e, 0, errTruncated
	}
	end := r.off + int(length)
	e.body = reader{buf: s.data[:end], off: r.off}
	idOff := r.off
	var id uint64
	if s.debug && is64 {
		id = e.body.u64()
	} else {
		id = uint64(e.body.u32())
	}
	if e.body.bad {
		return e, 0, errTruncated
	}
	switch {
	case !s.debug && id == 0, s.debug && id == 0xffffffff && !is64, s.debug && id == ^uint64(0):
		e.isCIE = true
	case !s.debug: // eh_frame: backwards from the id field
		if id > uint64(idOff) {
			return e, end, errCIEPointer
		}
		e.cieOff = idOff - int(id)
	default: // debug_frame: a section offset
		if id >= uint64(len(s.data)) {
			return e, end, errCIEPointer
		}
		e.cieOff = int(id)
	}
	return e, end, nil
}

// cie is what FDEs take from their CIE.
type cie struct {
	codeAlign uint64
	dataAlign int64
	raReg     uint64
	fdeEnc    uint8 // encoding of FDE addresses
	addrSize  int   // absptr size
	segSize   int   // debug_frame v4 segment selector size
	augData   bool  // 'z': FDEs carry augmentation data
	initial   ruleSet
	// initialErr is set when the initial instructions cannot be followed:
	// the FDEs of this CIE then get KindUnsupported rows.
	initialErr error
}

// parseCIE reads the CIE e (of section s) and runs its initial instructions.
func parseCIE(a *arch, s *frameSection, e entry) (*cie, error) {
	r := &e.body
	version := r.u8()
	if version != 1 && version != 3 && (!s.debug || version != 4) {
		return nil, fmt.Errorf("%w: version %d", errUnsupported, version)
	}
	aug := r.cstring()
	c := &cie{fdeEnc: peAbsptr, addrSize: 8}
	if s.debug && version == 4 {
		c.addrSize, c.segSize = int(r.u8()), int(r.u8())
		if c.addrSize != 4 && c.addrSize != 8 {
			return nil, fmt.Errorf("%w: address size %d", errUnsupported, c.addrSize)
		}
	}
	c.codeAlign = r.uleb()
	c.dataAlign = r.sleb()
	if version == 1 {
		c.raReg = uint64(r.u8())
	} else {
		c.raReg = r.uleb()
	}
	if len(aug) > 0 {
		if aug[0] != 'z' {
			return nil, fmt.Errorf("%w: augmentation %q", errUnsupported, aug)
		}
		c.augData = true
		d := reader{buf: r.block()}
		for _, ch := range aug[1:] {
			switch ch {
			case 'R':
				c.fdeEnc = d.u8()
			case 'L': // LSDA encoding
				d.u8()
			case 'P': // personality routine: skipped, only its size matters
				enc := d.u8()
				if _, err := d.pointer(enc&peFormat, 0, 0, c.addrSize); err != nil {
					return nil, fmt.Errorf("%w: personality: %v", errUnsupported, err)
				}
			case 'S': // signal frame: nothing to do, the expressions tell
			default:
				return nil, fmt.Errorf("%w: augmentation %q", errUnsupported, aug)
			}
		}
		if d.bad {
			return nil, errTruncated
		}
	}
	if r.bad {
		return nil, errTruncated
	}
	p := program{a: a, c: c, inCIE: true}
	c.initialErr = p.run(*r, s.addr)
	c.initial = p.rules
	return c, nil
}

// fde is the header of an FDE: its address range and instructions.
type fde struct {
	start, end uint64
	instr      reader
}

// parseFDE reads the header of the FDE e of CIE c.
func parseFDE(s *frameSection, e entry, c *cie) (fde, error) {
	r := &e.body
	r.take(uint64(c.segSize))
	start, err := r.pointer(c.fdeEnc, s.addr+uint64(r.off), 0, c.addrSize)
	if err != nil {
		return fde{}, err
	}
	size, err := r.pointer(c.fdeEnc&peFormat, 0, 0, c.addrSize)
	if err != nil {
		return fde{}, err
	}
	if c.augData {
		r.block()
	}
	if r.bad {
		return fde{}, errTruncated
	}
	end := start + size
	if end < start {
		return fde{}, errors.New("address range wraps")
	}
	return fde{start: start, end: end, instr: *r}, nil
}
