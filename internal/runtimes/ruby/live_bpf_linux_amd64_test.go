package ruby

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/cilium/ebpf/ringbuf"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/bpfprofiler/bpfprofiler/bpf"
	"github.com/bpfprofiler/bpfprofiler/internal/memlock"
	"github.com/bpfprofiler/bpfprofiler/internal/runtimes"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// bpfWalks is how many walks of the main thread TestBPFWalkLive names.
const bpfWalks = 300

// TestBPFWalkLive runs testdata/workloads/rubywork.rb on each Ruby (with
// --yjit too, where it has YJIT), fills its ruby_procs entry with
// WalkerProc, walks the sampled threads with bpf/ruby.h's ruby_walk
// (rubywalk.bpf.c, on cpu-clock), names the words the main thread's walks
// wrote and checks that most are the whole chain Burner#spin <- block in
// work <- Burner#work <- <main>, ended at the stack's root.
func TestBPFWalkLive(t *testing.T) {
	testutil.RequireBPF(t)
	w := startRubyWalker(t)
	for _, r := range testutil.RubyInterpreters(t) {
		t.Run(r.Name, func(t *testing.T) {
			f, err := elf.Open(r.Lib)
			require.NoError(t, err)
			defer f.Close()
			in, err := Detect(f)
			require.NoError(t, err)
			w.walkLive(t, r, in, nil)
			if hasYJIT(t, r) {
				t.Run("yjit", func(t *testing.T) { w.walkLive(t, r, in, []string{"--yjit"}) })
			}
		})
	}
}

// rubyWalker is rubywalk.bpf.c loaded and attached to a cpu-clock event
// on every CPU.
type rubyWalker struct {
	objs  bpf.RubywalkObjects
	walks *ringbuf.Reader
}

func startRubyWalker(t *testing.T) *rubyWalker {
	_ = memlock.Raise()
	w := &rubyWalker{}
	require.NoError(t, bpf.LoadRubywalkObjects(&w.objs, nil))
	t.Cleanup(func() { w.objs.Close() })
	var err error
	w.walks, err = ringbuf.NewReader(w.objs.Walks)
	require.NoError(t, err)
	t.Cleanup(func() { w.walks.Close() })
	for cpu := range runtime.NumCPU() {
		attr := unix.PerfEventAttr{
			Type:   unix.PERF_TYPE_SOFTWARE,
			Config: unix.PERF_COUNT_SW_CPU_CLOCK,
			Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
			Sample: 1_000_000, // ns: 1 kHz
		}
		fd, err := unix.PerfEventOpen(&attr, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
		require.NoError(t, err, "cpu-clock on cpu %d", cpu)
		t.Cleanup(func() { _ = unix.Close(fd) })
		require.NoError(t, unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_SET_BPF, w.objs.Rubywalk.FD()))
		require.NoError(t, unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0))
	}
	return w
}

// collect returns the first n walks of each thread of tids of process
// pid (whose ruby_procs entry it sets to proc), within a deadline.
func (w *rubyWalker) collect(t *testing.T, pid int, proc []byte, n int, tids ...uint32) map[uint32][]bpf.RubywalkRubywalkRecord {
	key := uint32(pid)
	require.NoError(t, w.objs.RubyProcs.Put(key, proc))
	defer func() { _ = w.objs.RubyProcs.Delete(key) }()
	out := map[uint32][]bpf.RubywalkRubywalkRecord{}
	for _, tid := range tids {
		out[tid] = nil
	}
	deadline := time.Now().Add(60 * time.Second)
	for done := 0; done < len(tids); {
		w.walks.SetDeadline(deadline)
		rec, err := w.walks.Read()
		require.NoError(t, err, "walks of threads %v: %v", tids, len(out))
		var r bpf.RubywalkRubywalkRecord
		_, err = binary.Decode(rec.RawSample, binary.NativeEndian, &r)
		require.NoError(t, err)
		if walks, ok := out[r.Tid]; ok && len(walks) < n {
			out[r.Tid] = append(walks, r)
			if len(walks)+1 == n {
				done++
			}
		}
	}
	return out
}

func (w *rubyWalker) walkLive(t *testing.T, r testutil.Ruby, in *Interpreter, extra []string) {
	cmd := testutil.StartRuby(t, r, extra, "60")
	pid := cmd.Process.Pid
	bias := testutil.LoadBias(t, pid, r.Lib)
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	require.NoError(t, err)
	defer mem.Close()
	proc, err := in.WalkerProc(mem, bias)
	require.NoError(t, err)

	walks := w.collect(t, pid, proc, bpfWalks, uint32(pid))[uint32(pid)]
	n := newWordNamer(t, in, mem, bias, "rubywork.rb")
	lines := rubyLines(t)
	ends := map[int32]int{}
	good := 0
	var seen []string
	for i, walk := range walks {
		ends[walk.End]++
		require.LessOrEqual(t, walk.Count, uint32(len(walk.Frames)))
		if walk.Count < uint32(len(walk.Frames)) {
			require.Zero(t, walk.Frames[walk.Count], "the words' terminator")
		}
		all, chain := n.name(walk.Frames[:walk.Count])
		if i < 3 {
			t.Logf("walk %d (end %d): %s", i, walk.End, strings.Join(all, " <- "))
		}
		seen = append(seen, strings.Join(chain, " <- "))
		if walk.End == 0 && matchesChain(chain, lines, "Burner#") { // RUNTIME_END_ROOT
			good++
		}
	}
	t.Logf("%d of %d BPF walks saw Burner#spin <- block in work <- Burner#work <- <main> (ends: %v)", good, len(walks), ends)
	require.GreaterOrEqual(t, good, len(walks)*9/10, "walks: %q", seen)
}

// wordNamer names the words of a walk from the process's memory.
type wordNamer struct {
	in          *Interpreter
	mem         *os.File
	p           runtimes.Process
	script      string
	classpathID uint64 // 3.1: the ID of __classpath__
}

func newWordNamer(t *testing.T, in *Interpreter, mem *os.File, bias uint64, script string) *wordNamer {
	n := &wordNamer{in: in, mem: mem, p: in.Process(mem, bias), script: testutil.Workload(t, script)}
	if in.Layout.ClassPathAt == 0 {
		object, err := runtimes.ReadMem(mem, bias+in.Object, 8)
		require.NoError(t, err)
		n.classpathID, err = in.Layout.ClasspathID(mem, binary.LittleEndian.Uint64(object))
		require.NoError(t, err)
	}
	return n
}

// name returns every frame of words described, and the script's frames
// as function:line (the methods' with their class), leaf first.
func (n *wordNamer) name(words []uint64) (all, chain []string) {
	l := &n.in.Layout
	for _, word := range words {
		object, position, entry := DecodeWord(word)
		kind, err := l.FrameObject(n.mem, object)
		if err != nil {
			all = append(all, fmt.Sprintf("<%#x: %v>", word, err))
			continue
		}
		iseq, class := object, ""
		if kind == FrameMethodEntry {
			if iseq, err = l.MethodIseq(n.mem, object); err != nil {
				all = append(all, fmt.Sprintf("<C frame me %#x entry=%v>", object, entry))
				continue
			}
			if class, err = l.ClassPath(n.mem, object, n.classpathID); err != nil {
				class = fmt.Sprintf("<class: %v>", err)
			}
			class += "#"
		}
		fr, err := n.p.Read(iseq, position, time.Now())
		if err != nil {
			all = append(all, fmt.Sprintf("<iseq %#x: %v>", iseq, err))
			continue
		}
		all = append(all, fmt.Sprintf("%s%s %s:%d entry=%v", class, fr.Function, filepath.Base(fr.File), fr.Line, entry))
		if fr.File == n.script {
			chain = append(chain, fmt.Sprintf("%s%s:%d", class, fr.Function, fr.Line))
		}
	}
	return all, chain
}

// hasYJIT says whether Ruby r runs with --yjit.
func hasYJIT(t *testing.T, r testutil.Ruby) bool {
	out, err := testutil.RunWithin(exec.Command(r.Path, append(r.Args, "--yjit", "-e", "p defined?(RubyVM::YJIT) && RubyVM::YJIT.enabled?")...), testutil.BuildTimeout)
	if err != nil || strings.TrimSpace(string(out)) != "true" {
		t.Logf("%s has no YJIT: %s", r.Name, strings.TrimSpace(string(out)))
		return false
	}
	return true
}

// deepWalks is how many walks of each thread TestBPFWalkDeepLive names.
const deepWalks = 100

// TestBPFWalkDeepLive runs testdata/workloads/rubydeep.rb: its main thread
// spins under a recursion deeper than a walk keeps, its thread "side" under
// a shallow stack; each is walked from its own ruby_current_ec. The main
// thread's walks end RUNTIME_END_DEPTH with its MAX_STACK_DEPTH innermost frames
// (spin, deep where it spins, deep where it recurses); the side thread's
// reach the root: spin <- side <- block in <main>.
func TestBPFWalkDeepLive(t *testing.T) {
	testutil.RequireBPF(t)
	w := startRubyWalker(t)
	lines := scriptLines(t, "rubydeep.rb")
	spinAt := func(frame string) bool {
		line, ok := strings.CutPrefix(frame, "Object#spin:")
		n, err := strconv.Atoi(line)
		return ok && err == nil && n > lines["spin_def"] && n <= lines["spin_end"]
	}
	for _, r := range testutil.RubyInterpreters(t) {
		t.Run(r.Name, func(t *testing.T) {
			f, err := elf.Open(r.Lib)
			require.NoError(t, err)
			defer f.Close()
			in, err := Detect(f)
			require.NoError(t, err)
			cmd := testutil.StartReadyWorkload(t, r.Path, append(append([]string{}, r.Args...), testutil.Workload(t, "rubydeep.rb"), "60")...)
			pid := cmd.Process.Pid
			side := threadNamed(t, pid, "side")
			bias := testutil.LoadBias(t, pid, r.Lib)
			mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
			require.NoError(t, err)
			defer mem.Close()
			proc, err := in.WalkerProc(mem, bias)
			require.NoError(t, err)

			walks := w.collect(t, pid, proc, deepWalks, uint32(pid), side)
			n := newWordNamer(t, in, mem, bias, "rubydeep.rb")
			deepSpin := fmt.Sprintf("Object#deep:%d", lines["deep_spin"])
			deepCall := fmt.Sprintf("Object#deep:%d", lines["deep_call"])
			goodDeep := 0
			for i, walk := range walks[uint32(pid)] {
				all, chain := n.name(walk.Frames[:walk.Count])
				if i == 0 {
					t.Logf("main thread, walk 0 (end %d, %d frames): %s ...", walk.End, walk.Count, strings.Join(all[:min(len(all), 4)], " <- "))
				}
				ok := walk.End == 3 && walk.Count == uint32(len(walk.Frames)) && len(chain) == len(walk.Frames) && // RUNTIME_END_DEPTH
					spinAt(chain[0]) && chain[1] == deepSpin
				for _, c := range chain[min(len(chain), 2):] {
					ok = ok && c == deepCall
				}
				if ok {
					goodDeep++
				}
			}
			sideChain := fmt.Sprintf("Object#side:%d <- block in <main>:%d", lines["side_spin"], lines["side_block"])
			goodSide := 0
			for i, walk := range walks[side] {
				all, chain := n.name(walk.Frames[:walk.Count])
				if i == 0 {
					t.Logf("side thread, walk 0 (end %d): %s", walk.End, strings.Join(all, " <- "))
				}
				if walk.End == 0 && len(chain) == 3 && spinAt(chain[0]) && strings.Join(chain[1:], " <- ") == sideChain {
					goodSide++
				}
			}
			t.Logf("main thread: %d of %d walks the %d innermost frames, cut; side thread: %d of %d the whole chain",
				goodDeep, deepWalks, len(walks[uint32(pid)][0].Frames), goodSide, deepWalks)
			require.GreaterOrEqual(t, goodDeep, deepWalks*9/10)
			require.GreaterOrEqual(t, goodSide, deepWalks*9/10)
		})
	}
}

// threadNamed returns the tid of pid's thread named name, waiting for it.
func threadNamed(t *testing.T, pid int, name string) uint32 {
	var tid uint32
	require.Eventually(t, func() bool {
		comms, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/comm", pid))
		for _, c := range comms {
			if b, err := os.ReadFile(c); err == nil && strings.TrimSpace(string(b)) == name {
				n, _ := strconv.Atoi(filepath.Base(filepath.Dir(c)))
				tid = uint32(n)
				return true
			}
		}
		return false
	}, 5*time.Second, 10*time.Millisecond, "no thread %q in process %d", name, pid)
	return tid
}
