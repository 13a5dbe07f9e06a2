package v8

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/runtimes"
)

// fakeFunction lays out, in m, a function f of /app.js whose ScopeInfo
// has locals context locals, for layout l; it returns its SFI and Script.
func fakeFunction(m *fakeMem, l *Layout, locals int) (sfi, scr uint64) {
	const src = "a\nfunction f() {}\n"
	scr = m.object(l.TypeScript, 64)
	m.put64(scr-1+uint64(l.ScriptSource), m.seqString(src))
	m.put64(scr-1+uint64(l.ScriptName), m.seqString("/app.js"))
	m.put64(scr-1+uint64(l.ScriptLineEnds), m.object(131, 48)) // undefined: not computed

	sl := l.Scope
	names := locals
	if locals >= sl.MaxInlinedLocals {
		names = 1
	}
	si := m.object(l.TypeScopeInfo, 32+8*(2+names+locals+2+2))
	flags := sl.FunctionScope | 3<<scopeFunctionVarShift
	m.put32(si-1+uint64(sl.FlagsOffset), flags)
	m.put64(si-1+24, smi(int32(locals)))
	slot := si - 1 + 32
	position := func() {
		m.put64(slot, smi(12)) // the "(" on line 2
		m.put64(slot+8, smi(17))
		slot += 16
	}
	if sl.PositionFirst {
		position()
	}
	for i := 0; i < names+locals; i++ {
		m.put64(slot, m.seqString("local"))
		slot += 8
	}
	m.put64(slot, m.seqString("f"))
	m.put64(slot+8, smi(-1))
	slot += 16
	if !sl.PositionFirst {
		position()
	}
	sfi = m.object(l.TypeSharedFunctionInfo, 64)
	m.put64(sfi-1+uint64(l.SFIFunctionData), smi(0))
	m.put64(sfi-1+uint64(l.SFINameOrScopeInfo), si)
	m.put64(sfi-1+uint64(l.SFIScript), scr)
	return sfi, scr
}

// A function is named from its ScopeInfo, in both ScopeInfo layouts, with
// its locals' names inline or in a hash table.
func TestFrameFromScopeInfo(t *testing.T) {
	for _, version := range [][2]int{{11, 3}, {13, 6}} {
		for _, locals := range []int{0, 3, 80} {
			l := testLayout()
			g, _ := gapsFor(version[0], version[1])
			l.Scope = g.Scope
			m := &fakeMem{}
			sfi, _ := fakeFunction(m, l, locals)
			f, err := NewNamer(m, l).Frame(sfi, 0, time.Now())
			require.NoError(t, err, "%v, %d locals", version, locals)
			assert.Equal(t, runtimes.Frame{Function: "f", File: "/app.js", Line: 2}, f, "%v, %d locals", version, locals)
		}
	}
}

// A Script's lines are read again after recheck when its source changed
// (a Script at a reused address).
func TestScriptRecheck(t *testing.T) {
	l := testLayout()
	m := &fakeMem{}
	sfi, scr := fakeFunction(m, l, 0)
	n := NewNamer(m, l)
	now := time.Now()
	f, err := n.Frame(sfi, 0, now)
	require.NoError(t, err)
	assert.Equal(t, int64(2), f.Line)

	m.put64(scr-1+uint64(l.ScriptSource), m.seqString("\n\n\nfunction f() {}\n"))
	f, err = n.Frame(sfi, 0, now.Add(time.Second))
	require.NoError(t, err)
	assert.Equal(t, int64(2), f.Line, "cached")
	f, err = n.Frame(sfi, 0, now.Add(recheck+time.Second))
	require.NoError(t, err)
	assert.Equal(t, int64(4), f.Line, "read again")
}

// The process's cache is bounded.
func TestProcessCacheBound(t *testing.T) {
	l := testLayout()
	m := &fakeMem{}
	sfi, _ := fakeFunction(m, l, 0)
	p := (&interpreter{layout: l}).Process(m, 0).(*process)
	now := time.Now()
	for i := range maxNamed + 10 {
		_, err := p.Read(sfi, uint32(i), now)
		require.NoError(t, err)
	}
	assert.LessOrEqual(t, len(p.named), maxNamed)
	_, ok := p.Cached(sfi, uint32(maxNamed+9), now)
	assert.True(t, ok)
}
