package allocs

import (
	"debug/elf"
	"errors"
	"fmt"
	"math/bits"

	"github.com/bpfprofiler/bpfprofiler/bpf"
	"github.com/bpfprofiler/bpfprofiler/internal/usdt"
)

// The OpenTelemetry memory profiling probes a native allocator fires:
// otel_memory:alloc(void *ptr, uint64_t size, uint64_t weighted_bytes) and
// otel_memory:free(void *ptr).
const (
	USDTAlloc = "otel_memory:alloc"
	USDTFree  = "otel_memory:free"
)

// DefaultUSDTInterval is the mean weighted bytes between sampled
// otel_memory allocations of a thread.
const DefaultUSDTInterval = 512 * 1024

// ErrNoAllocProbe: a file declares no otel_memory:alloc probe.
var ErrNoAllocProbe = errors.New("no " + USDTAlloc + " probe")

// usdtSite is one site of an otel_memory probe in a file: where its uprobe
// goes, its semaphore's file offset (0: none) and the fetch of its
// arguments (bpf/usdtargs.h).
type usdtSite struct {
	alloc          bool // otel_memory:alloc; else otel_memory:free
	offset, refCtr uint64
	args           bpf.AllocUsdtArgsSpec
}

// usdtSites returns the sites of the otel_memory probes of f: every
// otel_memory:alloc site and every otel_memory:free site.
// ErrNoAllocProbe: f has none of the first.
func usdtSites(f *elf.File) ([]usdtSite, error) {
	probes, err := usdt.Probes(f)
	if err != nil {
		if errors.Is(err, usdt.ErrNoProbes) {
			return nil, ErrNoAllocProbe
		}
		return nil, err
	}
	var out []usdtSite
	allocs := 0
	for _, p := range probes {
		want := map[string]int{USDTAlloc: 3, USDTFree: 1}[p.FullName()]
		if want == 0 {
			continue
		}
		s := usdtSite{alloc: want == 3, offset: p.Offset, refCtr: p.SemaphoreOffset}
		if s.args, err = usdtArgs(f.Machine, p.ArgSpecs, want); err != nil {
			return nil, fmt.Errorf("%s at %#x: %w", p.FullName(), p.Offset, err)
		}
		if s.alloc {
			allocs++
		}
		out = append(out, s)
	}
	if allocs == 0 {
		return nil, ErrNoAllocProbe
	}
	return out, nil
}

// usdtArgs returns the fetch of the first n arguments of a site of
// machine m whose argument specs are specs: a pointer or an integer of at
// most 8 bytes each.
func usdtArgs(m elf.Machine, specs string, n int) (bpf.AllocUsdtArgsSpec, error) {
	var out bpf.AllocUsdtArgsSpec
	args, err := usdt.ParseArgs(m, specs)
	if err != nil {
		return out, err
	}
	if len(args) < n {
		return out, fmt.Errorf("%d arguments, want %d", len(args), n)
	}
	for i, a := range args[:n] {
		s := bpf.AllocUsdtArgSpec{RegOff: a.RegOffset, Size: a.Size}
		switch a.Kind {
		case usdt.ArgConst:
			s.Kind, s.Value = usdtArgConst, a.Value
		case usdt.ArgRegister:
			s.Kind = usdtArgRegister
		case usdt.ArgMemory:
			s.Kind, s.Value = usdtArgMemory, a.Offset
		default:
			return out, fmt.Errorf("argument %d: kind %d", i, a.Kind)
		}
		if a.Signed {
			s.IsSigned = 1
		}
		out.Args[i] = s
	}
	return out, nil
}

// enum usdt_arg_kind in bpf/usdtargs.h; its usdt_specs' size.
const (
	usdtArgConst    = 1
	usdtArgRegister = 2
	usdtArgMemory   = 3
	maxUSDTSpecs    = 1024
)

// usdtSpecs hands out usdt_specs entries, one per distinct fetch, and the
// attach cookie naming each (its index + 1 in bits 16 to 31).
type usdtSpecs struct {
	put   func(uint32, *bpf.AllocUsdtArgsSpec) error
	index map[bpf.AllocUsdtArgsSpec]uint32
}

func (u *usdtSpecs) cookie(s bpf.AllocUsdtArgsSpec) (uint64, error) {
	i, ok := u.index[s]
	if !ok {
		i = uint32(len(u.index))
		if i >= maxUSDTSpecs {
			return 0, fmt.Errorf("more than %d distinct argument fetches", maxUSDTSpecs)
		}
		if err := u.put(i, &s); err != nil {
			return 0, fmt.Errorf("write argument fetch %d: %w", i, err)
		}
		u.index[s] = i
	}
	return uint64(i+1) << 16, nil
}

// expDraw is bpf/alloc.bpf.c's usdt_draw with r for bpf_get_prandom_u32:
// mean * -ln(U), U = (r+1) / 2^32, in integers (log2 in 16.16 fixed
// point by squarings).
func expDraw(r uint32, mean uint64) int64 {
	const ln2Q16 = 45426
	negLn := (((32 << 16) - log2Q16(uint64(r)+1)) * ln2Q16) >> 16
	return int64((mean * negLn) >> 16)
}

// log2Q16 is log2(x) for 1 <= x <= 2^32 in 16.16 fixed point, its
// fraction truncated (alloc.bpf.c's log2_q16).
func log2Q16(x uint64) uint64 {
	x = min(x, 1<<32)
	n := uint64(bits.Len64(x) - 1)
	m := uint64(1 << 31)
	if n <= 31 {
		m = x << (31 - n)
	}
	var frac uint64
	for i := 15; i >= 0; i-- {
		m = (m * m) >> 31
		t := m >> 32
		m >>= t
		frac |= t << i
	}
	return n<<16 | frac
}
