package main

// The soak suite's churning binaries: soakBinaries small C programs, each
// with a function of its own, rebuilt every -soak-rebuild into a fresh
// directory with a new build id (a generation constant in the source
// changes the code, so the linker's sha1 build id changes), the previous
// generation's files deleted once nothing starts them any more. A few
// long-lived ones burn CPU from the current generation and are started
// again at each rebuild: their tables are loaded and, two minutes after,
// dropped.

import (
	"context"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

const (
	soakCompileTimeout = time.Minute
	soakCompileJobs    = 2 // the machine's CPUs
	soakExecBurnUS     = 1000
	soakLongLived      = 5
	soakLongBurnUS     = 2000 // each long-lived one burns this every soakLongPeriodMS
	soakLongPeriodMS   = 100
	// soakDeleteDelay is how long a generation's files stay after the next
	// one took over: the pacer's execs chosen before the swap start.
	soakDeleteDelay = 2 * time.Second
)

// soakSource is a churning binary: soak_work_<index> burns argv[1] µs of
// its own CPU, once, or every argv[2] ms until killed.
const soakSource = `#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define INDEX %d
#define GENERATION %dUL

static volatile unsigned long sink;

static long cpu_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return ts.tv_sec * 1000000L + ts.tv_nsec / 1000;
}

__attribute__((noinline)) void soak_work_%d(long us)
{
	long end = cpu_us() + us;
	unsigned long x = GENERATION * 2654435761UL + INDEX;
	while (cpu_us() < end)
		for (int i = 0; i < 1000; i++)
			x = x * 6364136223846793005UL + GENERATION;
	sink = x;
}

int main(int argc, char **argv)
{
	long us = argc > 1 ? atol(argv[1]) : 1000;
	long period_ms = argc > 2 ? atol(argv[2]) : 0;
	for (;;) {
		soak_work_%d(us);
		if (period_ms <= 0)
			return 0;
		usleep((period_ms * 1000 - us) > 0 ? (period_ms * 1000 - us) : 0);
	}
}
`

// soakGeneration is one build of every binary.
type soakGeneration struct {
	n    int
	dir  string
	bins []string
}

// soakChurn builds, rebuilds and runs the churning binaries.
type soakChurn struct {
	dir, cc string
	count   int

	mu   sync.Mutex
	gen  *soakGeneration
	long []*groupProc

	nextExec   atomic.Int64 // round robin over the binaries
	builds     atomic.Int64 // binaries built
	buildIDs   map[string]bool
	idsMu      sync.Mutex
	rebuildErr atomic.Value // string: the last failed rebuild
	stopLoop   context.CancelFunc
	loopDone   chan struct{}
}

// startSoakChurn builds the first generation of count binaries under dir,
// starts the long-lived ones and rebuilds all every interval until stop.
func startSoakChurn(ctx context.Context, dir string, count int, interval time.Duration) (*soakChurn, error) {
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		return nil, fmt.Errorf("no C compiler %q to build the soak binaries (set CC): %w", cc, err)
	}
	c := &soakChurn{dir: dir, cc: cc, count: count, buildIDs: map[string]bool{}, loopDone: make(chan struct{})}
	gen, err := c.build(ctx, 0)
	if err != nil {
		return nil, err
	}
	if err := c.swap(gen); err != nil {
		c.stopLong()
		return nil, err
	}
	loopCtx, cancel := context.WithCancel(context.Background())
	c.stopLoop = cancel
	go c.rebuildLoop(loopCtx, interval)
	return c, nil
}

// rebuildLoop builds a new generation every interval and swaps it in.
func (c *soakChurn) rebuildLoop(ctx context.Context, interval time.Duration) {
	defer close(c.loopDone)
	t := time.NewTicker(interval)
	defer t.Stop()
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		gen, err := c.build(ctx, n)
		if err == nil {
			err = c.swap(gen)
		}
		if err != nil && ctx.Err() == nil {
			c.rebuildErr.Store(err.Error())
		}
	}
}

// build compiles generation n into a directory of its own.
func (c *soakChurn) build(ctx context.Context, n int) (*soakGeneration, error) {
	gen := &soakGeneration{n: n, dir: filepath.Join(c.dir, fmt.Sprintf("soak-gen-%d", n)), bins: make([]string, c.count)}
	if err := os.MkdirAll(gen.dir, 0o755); err != nil {
		return nil, err
	}
	jobs := make(chan int)
	errs := make([]error, c.count)
	var wg sync.WaitGroup
	for range soakCompileJobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				gen.bins[i], errs[i] = c.compile(ctx, gen, i)
			}
		}()
	}
	for i := range c.count {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		os.RemoveAll(gen.dir)
		return nil, err
	}
	return gen, nil
}

// compile builds binary i of gen and records its build id.
func (c *soakChurn) compile(ctx context.Context, gen *soakGeneration, i int) (string, error) {
	src := filepath.Join(gen.dir, fmt.Sprintf("soak-%d.c", i))
	bin := filepath.Join(gen.dir, fmt.Sprintf("soak-%d", i))
	if err := os.WriteFile(src, fmt.Appendf(nil, soakSource, i, gen.n, i, i), 0o644); err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, soakCompileTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, c.cc, "-O2", "-g", "-Wl,--build-id=sha1", "-o", bin, src).CombinedOutput()
	os.Remove(src)
	if err != nil {
		return "", fmt.Errorf("compiling soak binary %d of generation %d: %v\n%s", i, gen.n, err, out)
	}
	id, err := readBuildID(bin)
	if err != nil {
		return "", err
	}
	c.idsMu.Lock()
	c.buildIDs[id] = true
	c.idsMu.Unlock()
	c.builds.Add(1)
	return bin, nil
}

// swap makes gen the one the pacer and the long-lived processes run, and
// deletes the previous generation's files soakDeleteDelay later.
func (c *soakChurn) swap(gen *soakGeneration) error {
	c.mu.Lock()
	old := c.gen
	c.gen = gen
	c.mu.Unlock()
	c.stopLong()
	var long []*groupProc
	for k := range soakLongLived {
		// Another set of binaries each generation.
		bin := gen.bins[(gen.n*soakLongLived+k)%len(gen.bins)]
		cmd := exec.Command(bin, strconv.Itoa(soakLongBurnUS), strconv.Itoa(soakLongPeriodMS))
		p, err := startGroup(filepath.Base(bin), cmd)
		if err != nil {
			for _, q := range long {
				q.kill()
			}
			return err
		}
		long = append(long, p)
	}
	c.mu.Lock()
	c.long = long
	c.mu.Unlock()
	if old != nil {
		time.AfterFunc(soakDeleteDelay, func() { os.RemoveAll(old.dir) })
	}
	return nil
}

// nextArgv is the pacer's next run: the binaries in turn, of the current
// generation, burning soakExecBurnUS once.
func (c *soakChurn) nextArgv() []string {
	c.mu.Lock()
	gen := c.gen
	c.mu.Unlock()
	i := int(c.nextExec.Add(1)) % len(gen.bins)
	return []string{gen.bins[i], strconv.Itoa(soakExecBurnUS)}
}

// distinctBuildIDs is how many distinct build ids were built, and how many
// binaries.
func (c *soakChurn) distinctBuildIDs() (ids int, builds int64) {
	c.idsMu.Lock()
	defer c.idsMu.Unlock()
	return len(c.buildIDs), c.builds.Load()
}

// lastError is the last rebuild's error, "" for none.
func (c *soakChurn) lastError() string {
	s, _ := c.rebuildErr.Load().(string)
	return s
}

func (c *soakChurn) stopLong() {
	c.mu.Lock()
	long := c.long
	c.long = nil
	c.mu.Unlock()
	for _, p := range long {
		p.kill()
	}
}

// stop ends the rebuilds and the long-lived processes; safe on nil.
func (c *soakChurn) stop() {
	if c == nil {
		return
	}
	if c.stopLoop != nil {
		c.stopLoop()
		<-c.loopDone
		c.stopLoop = nil
	}
	c.stopLong()
}

// readBuildID returns the GNU build id of ELF file path, in hex.
func readBuildID(path string) (string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	s := f.Section(".note.gnu.build-id")
	if s == nil {
		return "", fmt.Errorf("%s: no .note.gnu.build-id", path)
	}
	data, err := s.Data()
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return parseBuildIDNote(data, f.ByteOrder)
}

// parseBuildIDNote reads the descriptor of an ELF note of type
// NT_GNU_BUILD_ID (namesz, descsz, type, "GNU\0", desc), in hex.
func parseBuildIDNote(data []byte, order interface{ Uint32([]byte) uint32 }) (string, error) {
	if len(data) < 16 {
		return "", fmt.Errorf("build id note of %d bytes", len(data))
	}
	namesz, descsz, typ := order.Uint32(data), order.Uint32(data[4:]), order.Uint32(data[8:])
	name := (namesz + 3) &^ 3
	if typ != 3 || uint64(12)+uint64(name)+uint64(descsz) > uint64(len(data)) || descsz == 0 {
		return "", fmt.Errorf("not a GNU build id note (type %d, name %d, desc %d bytes)", typ, namesz, descsz)
	}
	return hex.EncodeToString(data[12+name : 12+name+descsz]), nil
}
