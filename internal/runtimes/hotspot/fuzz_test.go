package hotspot

import (
	"debug/elf"
	"testing"
	"time"
)

// Whatever a process puts in its memory, reading its tables, its code
// cache and its methods ends, without a panic, within the read bounds.
func FuzzReadHostileMemory(f *testing.F) {
	im := jvmImage()
	f.Add(im.mem.b, uint64(0))
	f.Add(make([]byte, 4096), uint64(0x10000))
	f.Fuzz(func(t *testing.T, data []byte, pc uint64) {
		mem := &fakeMem{base: 0x10000, b: data}
		// The exports point at fixed places of the image.
		addr := func(s string) (uint64, bool) {
			a, ok := im.syms[s]
			return a, ok
		}
		_, _ = WalkerProc(mem, addr, elf.EM_AARCH64)
		vm, err := Read(mem, addr)
		if err != nil {
			return
		}
		l, err := NewLayout(vm)
		if err != nil {
			// Fill what is missing with offsets into the data.
			l = &Layout{BlockHeaderSize: 16, HeapsAddr: 0x10000, LowBoundAddr: 0x10008, HighBoundAddr: 0x10010, ArrayData: 8}
		}
		n := NewNamer(mem, addr)
		n.layout = l
		_, _ = n.At(pc, time.Now())
		if cc, err := ReadCodeCache(mem, l); err == nil {
			for _, h := range cc.Heaps {
				_, _ = BlobAt(mem, l, h, pc)
			}
		}
		_, _ = ReadMethod(mem, l, pc)
		d := &DebugLayout{FlagsWidth: 2, HasLineTable: 1, PcDescSize: 16, PcScope: 4, ScopesPcs: 8, PcsEnd: 12, ScopesData: 16, MetadataAt: 24}
		for _, immutable := range []bool{false, true} {
			d.Immutable = immutable
			_, _ = Scopes(mem, d, 0x10000, 0x10000, pc, nil)
			_, _ = Scopes(mem, d, 0x10000, 0x10000, pc, &DebugCache{})
			_, _ = LineOf(mem, l, d, 0x10000+pc%uint64(len(data)+1), int(pc%4096), nil)
			_, _ = LineOf(mem, l, d, 0x10000+pc%uint64(len(data)+1), int(pc%4096), &LineCache{})
		}
	})
}
