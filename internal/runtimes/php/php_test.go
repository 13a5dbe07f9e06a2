package php

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/runtimes"
	"github.com/bpfprofiler/bpfprofiler/internal/testutil"
)

// fakeMem is a process's memory made of regions.
type fakeMem map[uint64][]byte

func (m fakeMem) ReadAt(b []byte, off int64) (int, error) {
	for start, r := range m {
		if uint64(off) >= start && uint64(off)+uint64(len(b)) <= start+uint64(len(r)) {
			return copy(b, r[uint64(off)-start:]), nil
		}
	}
	return 0, io.EOF
}

// fakeProcess builds in m, with layout l, a zend_string at addr.
func putString(m fakeMem, l *Layout, addr uint64, s string) {
	b := make([]byte, int(l.StringVal)+len(s)+1)
	binary.LittleEndian.PutUint64(b[l.StringLen:], uint64(len(s)))
	copy(b[l.StringVal:], s)
	m[addr] = b
}

// putFunction puts a zend_function of type typ at addr: named name (at
// addr+0x1000, none if ""), of class class (at addr+0x2000, none if ""),
// with ops of the lines lines (at addr+0x3000) in file.
func putFunction(m fakeMem, l *Layout, addr uint64, typ byte, name, class, file string, lines ...uint32) {
	b := make([]byte, l.FunctionSize)
	b[l.FunctionType] = typ
	if name != "" {
		putString(m, l, addr+0x1000, name)
		binary.LittleEndian.PutUint64(b[l.FunctionName:], addr+0x1000)
	}
	if class != "" {
		c := make([]byte, l.ClassName+8)
		binary.LittleEndian.PutUint64(c[l.ClassName:], addr+0x2100)
		m[addr+0x2000] = c
		putString(m, l, addr+0x2100, class)
		binary.LittleEndian.PutUint64(b[l.FunctionScope:], addr+0x2000)
	}
	if typ != internalFunction {
		ops := make([]byte, len(lines)*int(l.OpSize))
		for i, line := range lines {
			binary.LittleEndian.PutUint32(ops[i*int(l.OpSize)+int(l.OpLineno):], line)
		}
		m[addr+0x3000] = ops
		putString(m, l, addr+0x4000, file)
		binary.LittleEndian.PutUint32(b[l.OpArrayLast:], uint32(len(lines)))
		binary.LittleEndian.PutUint64(b[l.OpArrayOpcodes:], addr+0x3000)
		binary.LittleEndian.PutUint64(b[l.OpArrayFilename:], addr+0x4000)
		binary.LittleEndian.PutUint32(b[l.OpArrayLineStart:], lines[0])
		binary.LittleEndian.PutUint32(b[l.OpArrayLineEnd:], lines[len(lines)-1])
	}
	m[addr] = b
}

// putFrame puts an execute_data at addr running fn at opline, with call
// info info, whose caller's is prev.
func putFrame(m fakeMem, l *Layout, addr, fn, opline uint64, info uint32, prev uint64) {
	b := make([]byte, executeDataSize)
	binary.LittleEndian.PutUint64(b[l.ExecuteDataOpline:], opline)
	binary.LittleEndian.PutUint64(b[l.ExecuteDataFunc:], fn)
	binary.LittleEndian.PutUint32(b[l.ExecuteDataCallInfo:], info)
	binary.LittleEndian.PutUint64(b[l.ExecuteDataPrev:], prev)
	m[addr] = b
}

const (
	egAddr    = 0x10000
	mainFn    = 0x100000
	workFn    = 0x200000
	spinFn    = 0x300000
	strlenFn  = 0x400000
	stackBase = 0x900000
)

// fakeProcess is a process of layout l running strlen (called back by
// zend_call_function) <- Spinner::spin <- work <- {main}.
func fakeProcess(l *Layout) fakeMem {
	m := fakeMem{}
	putFunction(m, l, mainFn, userFunction, "", "", "/app/index.php", 1, 2, 3)
	putFunction(m, l, workFn, userFunction, "work", "", "/app/index.php", 10, 11, 12)
	putFunction(m, l, spinFn, userFunction, "spin", "Spinner", "/app/index.php", 20, 21, 22, 23)
	putFunction(m, l, strlenFn, internalFunction, "strlen", "", "")
	eg := make([]byte, l.CurrentExecuteData+8)
	binary.LittleEndian.PutUint64(eg[l.CurrentExecuteData:], stackBase+0x300)
	m[egAddr] = eg
	op := func(fn uint64, i int) uint64 { return fn + 0x3000 + uint64(i)*uint64(l.OpSize) }
	putFrame(m, l, stackBase+0x300, strlenFn, 0, callTop, stackBase+0x200)
	putFrame(m, l, stackBase+0x200, spinFn, op(spinFn, 2), 0, stackBase+0x100)
	putFrame(m, l, stackBase+0x100, workFn, op(workFn, 1), 0, stackBase)
	putFrame(m, l, stackBase, mainFn, op(mainFn, 2), callTop|1<<16, 0)
	return m
}

func TestWalkAndName(t *testing.T) {
	for v, l := range layouts {
		t.Run(v, func(t *testing.T) {
			require.True(t, l.covers())
			m := fakeProcess(&l)
			frames, err := l.Walk(m, egAddr, 64)
			require.NoError(t, err)
			require.Equal(t, []WalkedFrame{
				{Function: strlenFn, Position: NoPosition},
				{Function: spinFn, Position: 2},
				{Function: workFn, Position: 1},
				{Function: mainFn + 0x4000, Position: 3, Entry: true, Code: true}, // its file name, its line
			}, frames)
			in := &Interpreter{Layout: l}
			p := in.Process(m, 0)
			now := time.Now()
			var got []runtimes.Frame
			for _, f := range frames {
				_, ok := p.Cached(f.Object(), f.Position, now)
				require.False(t, ok)
				fr, err := p.Read(f.Object(), f.Position, now)
				require.NoError(t, err)
				cached, ok := p.Cached(f.Object(), f.Position, now)
				require.True(t, ok)
				require.Equal(t, fr, cached)
				got = append(got, fr)
			}
			require.Equal(t, []runtimes.Frame{
				{Function: "strlen"},
				{Function: "Spinner::spin", File: "/app/index.php", Line: 22},
				{Function: "work", File: "/app/index.php", Line: 11},
				{Function: "{main}", File: "/app/index.php", Line: 3},
			}, got)

			// Another function at spin's address: the cache is used
			// until recheck, then the cookie tells it apart.
			putFunction(m, &l, spinFn, userFunction, "other", "", "/app/b.php", 40, 41, 42)
			fr, err := p.Read(spinFn, 1, now.Add(time.Second))
			require.NoError(t, err)
			require.Equal(t, "Spinner::spin", fr.Function)
			fr, err = p.Read(spinFn, 1, now.Add(time.Second+recheck))
			require.NoError(t, err)
			require.Equal(t, runtimes.Frame{Function: "other", File: "/app/b.php", Line: 41}, fr)
			// A position past the function's ops has no line.
			fr, err = p.Read(spinFn, 3, now.Add(time.Second+recheck))
			require.NoError(t, err)
			require.Equal(t, int64(0), fr.Line)
		})
	}
}

// TestHostileMemory checks what a process that is not what it seems makes
// of the walk and the naming: errors or bounded results, never a panic or
// an unbounded read.
func TestHostileMemory(t *testing.T) {
	l := layouts["8.4"]
	t.Run("cycle", func(t *testing.T) {
		m := fakeProcess(&l)
		putFrame(m, &l, stackBase, mainFn, 0, callTop, stackBase+0x300) // {main}'s caller is the innermost
		frames, err := l.Walk(m, egAddr, 10)
		require.NoError(t, err)
		require.Len(t, frames, 10)
	})
	t.Run("opline", func(t *testing.T) {
		for _, opline := range []uint64{spinFn + 0x3000 + 1, spinFn, spinFn + 0x3000 + 4*uint64(l.OpSize), ^uint64(0)} {
			m := fakeProcess(&l)
			putFrame(m, &l, stackBase+0x200, spinFn, opline, 0, 0)
			frames, err := l.Walk(m, egAddr, 10)
			require.NoError(t, err)
			require.Equal(t, NoPosition, frames[1].Position, "opline %#x", opline)
		}
	})
	t.Run("unmapped", func(t *testing.T) {
		m := fakeProcess(&l)
		putFrame(m, &l, stackBase+0x200, 0xdead0000, 0, 0, stackBase+0x100)
		frames, err := l.Walk(m, egAddr, 10)
		require.Error(t, err)
		require.Len(t, frames, 1)
	})
	t.Run("strings", func(t *testing.T) {
		m := fakeProcess(&l)
		long := strings.Repeat("é", 2000)
		putString(m, &l, spinFn+0x1000, long)
		f, err := l.ReadFunction(m, spinFn)
		require.NoError(t, err)
		require.Equal(t, "Spinner::"+strings.ToValidUTF8(long[:maxStringBytes], "\uFFFD"), f.Name)
		binary.LittleEndian.PutUint64(m[spinFn+0x1000][l.StringLen:], 1<<40)
		_, err = l.ReadFunction(m, spinFn)
		require.ErrorContains(t, err, "not a zend_string")
	})
	t.Run("function", func(t *testing.T) {
		for name, change := range map[string]func(b []byte){
			"type":  func(b []byte) { b[l.FunctionType] = 9 },
			"ops":   func(b []byte) { binary.LittleEndian.PutUint32(b[l.OpArrayLast:], maxOps+1) },
			"none":  func(b []byte) { binary.LittleEndian.PutUint32(b[l.OpArrayLast:], 0) },
			"lines": func(b []byte) { binary.LittleEndian.PutUint32(b[l.OpArrayLineStart:], 1<<30) },
		} {
			m := fakeProcess(&l)
			change(m[spinFn])
			_, err := l.ReadFunction(m, spinFn)
			require.ErrorIs(t, err, ErrNotFunction, name)
		}
	})
}

func TestLayoutOf(t *testing.T) {
	_, err := layoutOf(Version{8, 3, 1}, 1900)
	require.ErrorIs(t, err, ErrUnsupported)
	require.ErrorContains(t, err, "version 8.3.1")
	_, err = layoutOf(Version{8, 2, 36}, 1808)
	require.ErrorIs(t, err, ErrUnsupported)
	l, err := layoutOf(Version{8, 4, 27}, 1984)
	require.NoError(t, err)
	require.Equal(t, layouts["8.4"], l)
}

func TestParseVersion(t *testing.T) {
	for in, want := range map[string]Version{
		"8.2.36\x00":           {8, 2, 36},
		"8.4.0RC1\x00":         {8, 4, 0},
		"8.2.36-1+deb12u1\x00": {8, 2, 36},
	} {
		got, ok := parseVersion([]byte(in))
		require.True(t, ok, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "8", "8.2", "8.2.\x00", "x.2.3", "8.2.12345"} {
		_, ok := parseVersion([]byte(in))
		require.False(t, ok, in)
	}
}

// TestDetect detects Debian's PHP in its CLI and FPM programs, amd64 and
// arm64, and none in opcache.so.
func TestDetect(t *testing.T) {
	for _, arch := range []string{"amd64", "arm64"} {
		for _, v := range testutil.PHPVersions {
			t.Run(arch+"/"+v, func(t *testing.T) {
				p, err := testutil.DebianPHPOf(arch, v)
				if err != nil {
					testutil.SkipOrFail(t, "Debian's PHP %s (%s): %v", v, arch, err)
				}
				root := filepath.Dir(filepath.Dir(filepath.Dir(p.Path)))
				for _, path := range []string{p.Path, filepath.Join(root, "usr/sbin/php-fpm"+v)} {
					f, err := elf.Open(path)
					require.NoError(t, err)
					defer f.Close()
					require.True(t, Runtime.MayHold(f), path)
					in, err := Detect(f)
					require.NoError(t, err, path)
					require.Equal(t, v, in.RuntimeVersion())
					require.Equal(t, layouts[v], in.Layout)
					b, err := in.WalkerProc(nil, 0x1000)
					require.NoError(t, err)
					require.Len(t, b, 72)
					require.Equal(t, in.ExecutorGlobals+0x1000, binary.LittleEndian.Uint64(b))
					require.NotZero(t, in.ExecuteExStart, "execute_ex")
					require.Greater(t, in.ExecuteExEnd, in.ExecuteExStart)
					require.Equal(t, in.ExecuteExStart+0x1000, binary.LittleEndian.Uint64(b[8:]))
					require.Equal(t, in.ExecuteExEnd+0x1000, binary.LittleEndian.Uint64(b[16:]))
				}
				f, err := elf.Open(filepath.Join(p.ExtensionDir, "opcache.so"))
				require.NoError(t, err)
				defer f.Close()
				require.False(t, Runtime.MayHold(f))
				_, err = Detect(f)
				require.True(t, errors.Is(err, ErrNotPHP), "%v", err)
			})
		}
	}
}

// Hostile memory makes errors or bounded names, never a panic or an
// unbounded read: the fuzzer writes spin's zend_function, its name, the
// innermost execute_data and spin's ops.
func FuzzReadFunction(f *testing.F) {
	l := layouts["8.4"]
	seed := fakeProcess(&l)
	f.Add(seed[spinFn], seed[spinFn+0x1000], seed[stackBase+0x200], seed[spinFn+0x3000], uint32(2))
	f.Fuzz(func(t *testing.T, fn, name, frame, ops []byte, position uint32) {
		for _, v := range []string{"8.2", "8.4"} {
			l := layouts[v]
			m := fakeProcess(&l)
			m[spinFn] = append(fn, make([]byte, max(0, int(l.FunctionSize)-len(fn)))...)
			m[spinFn+0x1000] = name
			m[stackBase+0x200] = frame
			m[spinFn+0x3000] = ops
			frames, _ := l.Walk(m, egAddr, 16)
			require.LessOrEqual(t, len(frames), 16)
			if fun, err := l.ReadFunction(m, spinFn); err == nil {
				// Each string is cut to maxStringBytes, whose invalid
				// UTF-8 bytes may each become a 3-byte U+FFFD.
				require.LessOrEqual(t, len(fun.Name), 2*3*maxStringBytes+2, "class::name")
				require.LessOrEqual(t, len(fun.File), 3*maxStringBytes)
				_, _ = fun.Line(&l, m, position)
			}
			p := (&Interpreter{Layout: l}).Process(m, 0)
			_, _ = p.Read(spinFn, position, time.Now())
		}
	})
}
