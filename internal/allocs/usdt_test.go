package allocs

import (
	"debug/elf"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/bpf"
)

// log2Q16 is log2 to within its 16 fraction bits (truncated) over the
// range of bpf_get_prandom_u32() + 1.
func TestLog2Q16(t *testing.T) {
	for _, x := range []uint64{1, 2, 3, 5, 1000, 1 << 20, 123456789, 1<<31 + 1, 1<<32 - 1, 1 << 32, 1 << 40} {
		want := math.Log2(float64(min(x, 1<<32)))
		got := float64(log2Q16(x)) / 65536
		require.InDelta(t, want-0.5/65536, got, 1.5/65536, "log2(%d)", x)
	}
}

// The draws of expDraw (usdt_draw's arithmetic, fed uniform random
// numbers as bpf_get_prandom_u32 yields them) are exponential with the
// interval as mean: their mean, the share above the mean (1/e) and above
// 3 means (1/e^3), within the statistical error of a million draws.
func TestExpDrawMean(t *testing.T) {
	for _, mean := range []uint64{512, 4096, DefaultUSDTInterval, 1 << 30} {
		rng := rand.New(rand.NewPCG(1, mean))
		const n = 1_000_000
		var sum float64
		var above1, above3, negative int
		for range n {
			d := expDraw(rng.Uint32(), mean)
			if d < 0 {
				negative++
			}
			sum += float64(d)
			if d > int64(mean) {
				above1++
			}
			if d > 3*int64(mean) {
				above3++
			}
		}
		require.Zero(t, negative)
		// The standard deviation of an exponential is its mean: the
		// mean of n draws is within 0.5% (5 sigma) of it.
		require.InEpsilon(t, float64(mean), sum/n, 0.005, "mean of draws of mean %d", mean)
		require.InDelta(t, math.Exp(-1), float64(above1)/n, 0.003, "share above the mean")
		require.InDelta(t, math.Exp(-3), float64(above3)/n, 0.002, "share above 3 means")
	}
	require.Zero(t, expDraw(math.MaxUint32, 1<<20), "U = 1: -ln U = 0")
	require.InEpsilon(t, 22.18*1024, float64(expDraw(0, 1024)), 0.01, "U = 2^-32: -ln U = 32 ln 2")
}

// A sampled event stands for weight/p bytes in weight/size/p objects, p
// the chance of sampling it.
func TestScaleWeighted(t *testing.T) {
	p := 1 - math.Exp(-0.5)
	for _, tt := range []struct {
		name                   string
		size, weight, interval uint64
		objects, bytes         float64
	}{
		{"no weight", 100, 0, 1024, 0, 0},
		{"not sampling allocator", 512, 512, 1024, 1 / p, 512 / p},
		{"allocator's own sampling", 64, 512, 1024, 8 / p, 512 / p},
		{"every event kept", 100, 100, 1, 1, 100},
		{"size unknown", 0, 512, 1024, 1 / p, 512 / p},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o, b := ScaleWeighted(tt.size, tt.weight, tt.interval)
			require.InDelta(t, tt.objects, o, 1e-9)
			require.InDelta(t, tt.bytes, b, 1e-6)
		})
	}
}

// Native objects are live from their allocation: no garbage collection
// needs to judge them first.
func TestTrackerNative(t *testing.T) {
	tr := NewTracker(0)
	tr.Malloc(Malloc{PID: 1, TID: 1, Addr: 0x10, Size: 100, Weight: 100, Rate: 100, Native: true, Stack: []uint64{1}})
	tr.Malloc(Malloc{PID: 1, TID: 1, Addr: 0x20, Size: 100, Rate: 100, Stack: []uint64{2}}) // Go's
	w := tr.Drain()
	require.Len(t, w.AllocSpace, 2)
	require.Len(t, w.InuseSpace, 1, "the native object only")
	require.Equal(t, uint64(math.Round(100/(1-math.Exp(-1)))), w.InuseSpace[0].Value)
	tr.Free(1, 0x10)
	require.Empty(t, tr.Drain().InuseSpace)
}

// The argument fetches of otel_memory sites, as gcc -O2 notes them.
func TestUSDTArgs(t *testing.T) {
	reg := func(off uint16) bpf.AllocUsdtArgSpec {
		return bpf.AllocUsdtArgSpec{Kind: usdtArgRegister, RegOff: off, Size: 8}
	}
	for _, tt := range []struct {
		name    string
		machine elf.Machine
		specs   string
		n       int
		want    [3]bpf.AllocUsdtArgSpec
		err     bool
	}{
		{"x86-64 registers", elf.EM_X86_64, "8@%rax 8@%rbx 8@%rbx", 3, [3]bpf.AllocUsdtArgSpec{reg(80), reg(40), reg(40)}, false},
		{"x86-64 memory and constant", elf.EM_X86_64, "8@%rdi -4@-12(%rbp) 8@$42", 3, [3]bpf.AllocUsdtArgSpec{
			reg(112), {Kind: usdtArgMemory, RegOff: 32, Size: 4, IsSigned: 1, Value: -12}, {Kind: usdtArgConst, Size: 8, Value: 42},
		}, false},
		{"arm64", elf.EM_AARCH64, "8@x0 8@x19 8@[sp, 16]", 3, [3]bpf.AllocUsdtArgSpec{
			reg(0), reg(152), {Kind: usdtArgMemory, RegOff: 248, Size: 8, Value: 16},
		}, false},
		{"free", elf.EM_X86_64, "8@%rdi", 1, [3]bpf.AllocUsdtArgSpec{reg(112)}, false},
		{"too few", elf.EM_X86_64, "8@%rdi", 3, [3]bpf.AllocUsdtArgSpec{}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := usdtArgs(tt.machine, tt.specs, tt.n)
			if tt.err {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want[:], got.Args[:3])
			require.Zero(t, got.Args[3])
		})
	}
}

// Sites with the same fetch share a usdt_specs entry; the cookie is its
// index + 1 in bits 16 to 31.
func TestUSDTSpecsCookie(t *testing.T) {
	var put []uint32
	u := usdtSpecs{index: map[bpf.AllocUsdtArgsSpec]uint32{}, put: func(i uint32, _ *bpf.AllocUsdtArgsSpec) error {
		put = append(put, i)
		return nil
	}}
	a, b := bpf.AllocUsdtArgsSpec{}, bpf.AllocUsdtArgsSpec{}
	b.Args[0].Kind = usdtArgRegister
	for _, tt := range []struct {
		spec bpf.AllocUsdtArgsSpec
		want uint64
	}{{a, 1 << 16}, {b, 2 << 16}, {a, 1 << 16}} {
		got, err := u.cookie(tt.spec)
		require.NoError(t, err)
		require.Equal(t, tt.want, got)
	}
	require.Equal(t, []uint32{0, 1}, put)
}
