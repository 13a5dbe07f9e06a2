package ruby

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/bpfprofiler/bpfprofiler/internal/runtimes"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// reads is how many times TestWalkLive walks the running main thread.
const reads = 50

// TestWalkLive runs testdata/workloads/rubywork.rb on each Ruby, finds the
// main thread's execution context from process memory (through
// ruby_current_vm_ptr where the VM exports it, through the thread's
// ruby_current_ec TLS slot as well), walks its control frames with Walk
// while it runs, names them with Process and checks that the chain
// spin <- block in work <- work <- <main>, with the lines of the script,
// is most of what the walks see. With --yjit too, where the Ruby has YJIT.
func TestWalkLive(t *testing.T) {
	for _, r := range testutil.RubyInterpreters(t) {
		t.Run(r.Name, func(t *testing.T) {
			f, err := elf.Open(r.Lib)
			require.NoError(t, err)
			defer f.Close()
			in, err := Detect(f)
			require.NoError(t, err)
			require.True(t, strings.HasPrefix(in.Version, r.Version+"."), "version %q", in.Version)
			t.Logf("%s: %s, ruby_current_vm_ptr at %#x, ruby_current_ec's tls_index at %#x", r.Name, in.Description, in.VMPtr, in.ECTLS.Slot)
			walkLive(t, r, f, in, nil)
			if !hasYJIT(t, r) {
				return
			}
			t.Run("yjit", func(t *testing.T) { walkLive(t, r, f, in, []string{"--yjit"}) })
		})
	}
}

func walkLive(t *testing.T, r testutil.Ruby, f *elf.File, in *Interpreter, extra []string) {
	cmd := testutil.StartRuby(t, r, extra, "60")
	pid := cmd.Process.Pid
	bias := testutil.LoadBias(t, pid, r.Lib)
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	require.NoError(t, err)
	defer mem.Close()

	var ec uint64
	if in.VMPtr != 0 {
		vm, err := runtimes.ReadMem(mem, bias+in.VMPtr, 8)
		require.NoError(t, err)
		ec, err = in.Layout.MainEC(mem, binary.LittleEndian.Uint64(vm))
		require.NoError(t, err)
	}
	regs := mainRegs(t, pid)
	checkEntryStack(t, mem, f, bias, regs)
	if in.ECTLS.Slot != 0 {
		at, err := ECAddress(mem, regs.Fs_base, bias+in.ECTLS.Slot)
		require.NoError(t, err)
		checkTLS(t, mem, in, bias, regs.Fs_base, at)
		b, err := runtimes.ReadMem(mem, at, 8)
		require.NoError(t, err)
		tlsEC := binary.LittleEndian.Uint64(b)
		if ec != 0 {
			require.Equal(t, ec, tlsEC, "the main thread's ec through the VM and through ruby_current_ec")
		}
		ec = tlsEC
	}
	require.NotZero(t, ec, "no way to the main thread's execution context")

	lines := rubyLines(t)
	script := testutil.Workload(t, "rubywork.rb")
	p := in.Process(mem, bias)
	good := 0
	class := "Burner#" // the methods' class
	var classpathID uint64
	if in.Layout.ClassPathAt == 0 {
		require.NotZero(t, in.Object, "rb_cObject")
		object, err := runtimes.ReadMem(mem, bias+in.Object, 8)
		require.NoError(t, err)
		classpathID, err = in.Layout.ClasspathID(mem, binary.LittleEndian.Uint64(object))
		require.NoError(t, err)
		t.Logf("__classpath__ is ID %#x (serial %d)", classpathID, classpathID>>4)
	}
	var seen []string
	entry := entryOf(t, f, bias)
	for i := 0; i < reads; i++ {
		frames, err := in.Layout.Walk(mem, ec)
		if err != nil {
			t.Logf("walk %d: %v", i, err)
			continue
		}
		entry.checkFrames(t, mem, &in.Layout, frames)
		var chain []string
		var all []string
		for _, w := range frames {
			if w.Iseq == 0 {
				all = append(all, fmt.Sprintf("<C frame %#x me %#x entry=%v>", w.Magic, w.MethodEntry, w.Entry))
				continue
			}
			fr, err := p.Read(w.Iseq, w.Position, time.Now())
			if err != nil {
				all = append(all, fmt.Sprintf("<iseq %#x: %v>", w.Iseq, err))
				continue
			}
			if w.MethodEntry != 0 {
				class, err := in.Layout.ClassPath(mem, w.MethodEntry, classpathID)
				if err != nil {
					t.Logf("walk %d: class of %s: %v", i, fr.Function, err)
				} else {
					fr.Function = class + "#" + fr.Function
				}
			}
			all = append(all, fmt.Sprintf("%s %s:%d entry=%v", fr.Function, filepath.Base(fr.File), fr.Line, w.Entry))
			if fr.File == script {
				chain = append(chain, fmt.Sprintf("%s:%d", fr.Function, fr.Line))
			}
		}
		if i < 3 {
			t.Logf("walk %d: %s", i, strings.Join(all, " <- "))
		}
		seen = append(seen, strings.Join(chain, " <- "))
		if matchesChain(chain, lines, class) {
			good++
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("%d of %d walks saw %sspin <- block in work <- %swork <- <main>", good, reads, class, class)
	require.GreaterOrEqual(t, good, reads*8/10, "walks: %q", seen)
}

// matchesChain says whether chain (function:line, the script's frames) is
// spin (in its body) <- block in work <- work <- <main> at the marked
// lines, the methods' names after class.
func matchesChain(chain []string, lines map[string]int, class string) bool {
	if len(chain) != 4 {
		return false
	}
	name, line, _ := strings.Cut(chain[0], ":")
	n, _ := strconv.Atoi(line)
	return name == class+"spin" && n > lines["spin_def"] && n <= lines["spin_end"] &&
		chain[1] == fmt.Sprintf("block in work:%d", lines["work_block"]) &&
		chain[2] == fmt.Sprintf("%swork:%d", class, lines["work_times"]) &&
		chain[3] == fmt.Sprintf("<main>:%d", lines["main"])
}

var lineMarker = regexp.MustCompile(`#\s*line:(\w+)\s*$`)

// rubyLines returns the lines of rubywork.rb marked "# line:NAME".
func rubyLines(t *testing.T) map[string]int { return scriptLines(t, "rubywork.rb") }

// scriptLines returns the lines of workload script marked "# line:NAME".
func scriptLines(t *testing.T, script string) map[string]int {
	b, err := os.ReadFile(testutil.Workload(t, script))
	require.NoError(t, err)
	lines := map[string]int{}
	for i, l := range strings.Split(string(b), "\n") {
		if m := lineMarker.FindStringSubmatch(l); m != nil {
			lines[m[1]] = i + 1
		}
	}
	return lines
}

// mainRegs are the registers of pid's main thread, read by stopping it
// under ptrace for a moment.
func mainRegs(t *testing.T, pid int) syscall.PtraceRegs {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// Seized and interrupted, it is stopped once GETREGS answers: no wait
	// (the test's own reaper of its children would take the stop).
	require.NoError(t, ptrace(unix.PTRACE_SEIZE, pid, 0))
	defer func() { _ = ptrace(syscall.PTRACE_DETACH, pid, 0) }()
	require.NoError(t, ptrace(unix.PTRACE_INTERRUPT, pid, 0))
	var regs syscall.PtraceRegs
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := syscall.PtraceGetRegs(pid, &regs)
		if err == nil {
			break
		}
		require.True(t, time.Now().Before(deadline), "PTRACE_GETREGS: %v", err)
		time.Sleep(time.Millisecond)
	}
	return regs
}

func ptrace(request, pid int, data uintptr) error {
	if _, _, errno := syscall.Syscall6(syscall.SYS_PTRACE, uintptr(request), uintptr(pid), 0, data, 0, 0); errno != 0 {
		return errno
	}
	return nil
}
