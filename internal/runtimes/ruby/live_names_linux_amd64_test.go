package ruby

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/runtimes"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// TestNamesLive runs testdata/workloads/rubynames.rb on each Ruby, walks
// its main thread with Walk and names each frame's object as the BPF
// walker records it (a method entry for C frames and method frames, else
// the iseq) with Process: C methods by their names (Array#each, and
// Integer#times, a C method in 3.1 and a Ruby one in 3.3), singleton
// methods by the class or module they belong to (Tally.add_up of a
// module_function, Burner.helper of a def self.helper).
func TestNamesLive(t *testing.T) {
	want := []string{"block in Tally.add_up", "Array#each", "Tally.add_up", "block in Burner.helper", "Integer#times", "Burner.helper", "<main>"}
	for _, r := range testutil.RubyInterpreters(t) {
		t.Run(r.Name, func(t *testing.T) {
			f, err := elf.Open(r.Lib)
			require.NoError(t, err)
			defer f.Close()
			in, err := Detect(f)
			require.NoError(t, err)
			require.NotZero(t, in.Symbols, "ruby_global_symbols")
			args := append(append([]string{}, r.Args...), testutil.Workload(t, "rubynames.rb"), "60")
			cmd := testutil.StartReadyWorkload(t, r.Path, args...)
			pid := cmd.Process.Pid
			bias := testutil.LoadBias(t, pid, r.Lib)
			mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
			require.NoError(t, err)
			defer mem.Close()
			ecAt, err := ECAddress(mem, mainRegs(t, pid).Fs_base, bias+in.ECTLS.Slot)
			require.NoError(t, err)

			p := in.Process(mem, bias)
			good := 0
			var seen []string
			for i := 0; i < reads; i++ {
				b, err := runtimes.ReadMem(mem, ecAt, 8)
				require.NoError(t, err)
				frames, err := in.Layout.Walk(mem, binary.LittleEndian.Uint64(b))
				if err != nil {
					t.Logf("walk %d: %v", i, err)
					continue
				}
				var names []string
				for _, w := range frames {
					object := w.Iseq
					if kind, err := in.Layout.FrameObject(mem, w.MethodEntry); w.MethodEntry != 0 && err == nil && kind == FrameMethodEntry &&
						(w.Iseq == 0 || w.Magic == FrameMagicMethod) {
						object = w.MethodEntry
					}
					fr, err := p.Read(object, w.Position, time.Now())
					if err != nil {
						names = append(names, fmt.Sprintf("<%#x: %v>", object, err))
						continue
					}
					names = append(names, fr.Function)
				}
				chain := strings.Join(names, " <- ")
				if i < 3 {
					t.Logf("walk %d: %s", i, chain)
				}
				seen = append(seen, chain)
				if isSubsequence(want, names) {
					good++
				}
				time.Sleep(10 * time.Millisecond)
			}
			t.Logf("%d of %d walks saw %s", good, reads, strings.Join(want, " <- "))
			require.GreaterOrEqual(t, good, reads*8/10, "walks: %q", seen)
		})
	}
}

// isSubsequence says whether want's names appear in names in order.
func isSubsequence(want, names []string) bool {
	for _, n := range names {
		if len(want) > 0 && n == want[0] {
			want = want[1:]
		}
	}
	return len(want) == 0
}
