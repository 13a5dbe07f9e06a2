package ruby

import (
	"encoding/binary"
	"fmt"
	"io"
	"strings"

	"github.com/bpfprofiler/bpfprofiler/internal/runtimes"
)

// A block's frame holds its own iseq ("block in work"), whose class 3.1
// and 3.3 keep nowhere the walker records: it is the method entry's of
// the block's local ep (ep[-1] followed to VM_ENV_FLAG_LOCAL), which
// bpf/ruby.h does not read. The block's iseq leads to its method's
// (body.local_iseq), and that iseq to its class when a frame of the
// method itself was read through its method entry: process remembers the
// class of every method iseq so read, and names a block "block in
// Class#method" (as Ruby's rb_profile_frame_full_label builds it: the
// label's prefix, then the qualified method name) once it knows it. An
// iseq seen with two classes (a method iseq shared by several method
// entries, or its address reused) names its blocks without one.

// owner is the class of a method iseq, its label ("work"), and whether two
// classes were seen for it.
type owner struct {
	class, label         string
	singleton, ambiguous bool
}

// isBlock says label is a block's: "block in work", "block (2 levels) in
// work".
func isBlock(label string) bool {
	return strings.HasPrefix(label, "block in ") || strings.HasPrefix(label, "block (")
}

// LocalIseq is the iseq of the method (or <main>, a class body) whose
// block's iseq is at iseq: body.local_iseq.
func (l *Layout) LocalIseq(mem io.ReaderAt, iseq uint64) (uint64, error) {
	h, err := runtimes.ReadMem(mem, iseq, iseqHeaderSize)
	if err != nil {
		return 0, fmt.Errorf("read iseq at %#x: %w", iseq, err)
	}
	flags := binary.LittleEndian.Uint64(h)
	if flags&tMask != tImemo || flags>>imemoShift&0xf != imemoIseq {
		return 0, fmt.Errorf("object at %#x: %w (flags %#x)", iseq, ErrNotIseq, flags)
	}
	b, err := runtimes.ReadMem(mem, binary.LittleEndian.Uint64(h[l.IseqBody:])+uint64(l.BodyLocalIseq), 8)
	if err != nil {
		return 0, fmt.Errorf("iseq at %#x: read local_iseq: %w", iseq, err)
	}
	local := binary.LittleEndian.Uint64(b)
	if local == iseq || special(local) {
		return 0, fmt.Errorf("iseq at %#x: local_iseq %#x", iseq, local)
	}
	return local, nil
}

// learnOwner remembers the class of the method iseq at iseq, read through
// a method entry as c.
func (p *process) learnOwner(iseq uint64, c cachedIseq) {
	if c.class == "" || c.iseq == nil {
		return
	}
	o := owner{class: c.class, label: c.iseq.Label, singleton: c.singleton}
	if old, ok := p.owners[iseq]; ok {
		if old != o && !old.ambiguous {
			old.ambiguous = true
			p.owners[iseq] = old
		}
		return
	}
	if len(p.owners) >= maxIseqs || p.owners == nil {
		p.owners = make(map[uint64]owner)
	}
	p.owners[iseq] = o
}

// frame is c's frame at position, a block's with its method's class where
// it is known.
func (p *process) frame(c cachedIseq, position uint32) runtimes.Frame {
	f := c.frame(position)
	if c.local == 0 {
		return f
	}
	o, ok := p.owners[c.local]
	if !ok || o.ambiguous {
		return f
	}
	i := strings.Index(f.Function, " in ")
	if i < 0 || f.Function[i+4:] != o.label {
		return f
	}
	f.Function = f.Function[:i+4] + qualified(o.class, o.singleton, o.label)
	return f
}
