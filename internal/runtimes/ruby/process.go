package ruby

import (
	"encoding/binary"
	"io"
	"time"

	"github.com/bpfprofiler/bpfprofiler/internal/runtimes"
)

// maxIseqs bounds the iseqs cached per process; recheck is how long a
// cached one is used before its cookie is read again (a freed iseq's
// memory may hold another one later).
const (
	maxIseqs = 4096
	recheck  = 10 * time.Second
)

// process is what is cached about the VM of one process.
type process struct {
	layout *Layout
	mem    io.ReaderAt
	iseqs  map[uint64]cachedIseq
}

// cachedIseq is an iseq read, its cookie (its type, its body's address
// and its instructions' address: they change when the memory holds
// something else)
// and when the cookie was last seen unchanged.
type cachedIseq struct {
	iseq    *Iseq
	cookie  [3]uint64
	checked time.Time
}

// Cached names the frame of the iseq at iseq, at position, from the iseq
// read within recheck.
func (p *process) Cached(iseq uint64, position uint32, now time.Time) (runtimes.Frame, bool) {
	c, ok := p.iseqs[iseq]
	if !ok || now.Sub(c.checked) >= recheck {
		return runtimes.Frame{}, false
	}
	return frameOf(c.iseq, position), true
}

// Read names the frame of the iseq at iseq, at position: the cached iseq
// while its cookie is unchanged, else the one read now.
func (p *process) Read(iseq uint64, position uint32, now time.Time) (runtimes.Frame, error) {
	c, ok := p.iseqs[iseq]
	cookie, cerr := p.cookie(iseq)
	if !ok || cerr != nil || cookie != c.cookie {
		in, err := p.layout.ReadIseq(p.mem, iseq)
		if err != nil {
			delete(p.iseqs, iseq)
			return runtimes.Frame{}, err
		}
		c = cachedIseq{iseq: in, cookie: cookie}
	}
	if len(p.iseqs) >= maxIseqs || p.iseqs == nil {
		p.iseqs = make(map[uint64]cachedIseq)
	}
	c.checked = now
	p.iseqs[iseq] = c
	return frameOf(c.iseq, position), nil
}

// cookie reads the iseq's type bits (T_IMEMO, imemo_iseq), body pointer
// and the body's iseq_encoded.
func (p *process) cookie(iseq uint64) ([3]uint64, error) {
	h, err := runtimes.ReadMem(p.mem, iseq, int(p.layout.IseqBody)+8)
	if err != nil {
		return [3]uint64{}, err
	}
	body := binary.LittleEndian.Uint64(h[p.layout.IseqBody:])
	e, err := runtimes.ReadMem(p.mem, body+uint64(p.layout.BodyIseqEncoded), 8)
	if err != nil {
		return [3]uint64{}, err
	}
	return [3]uint64{binary.LittleEndian.Uint64(h) & (tMask | 0xf<<imemoShift), body, binary.LittleEndian.Uint64(e)}, nil
}

// frameOf is the frame of iseq at position: its label, path and line.
func frameOf(in *Iseq, position uint32) runtimes.Frame {
	return runtimes.Frame{Function: in.Label, File: in.Path, Line: int64(in.Line(position))}
}
