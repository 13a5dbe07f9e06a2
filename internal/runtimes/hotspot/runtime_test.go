package hotspot

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/bpfprofiler/bpfprofiler/internal/runtimes"
)

// An interpreted method is cached per bytecode index (each has its line),
// and a name is read again after recheck.
func TestCachedByPosition(t *testing.T) {
	now := time.Now()
	p := &process{named: map[namedKey]namedCode{{0x1000, 3}: {runtimes.Frame{Function: "A.b", Line: 7}, now}}}
	f, ok := p.Cached(0x1000, 3, now)
	assert.True(t, ok)
	assert.Equal(t, int64(7), f.Line)
	_, ok = p.Cached(0x1000, 4, now)
	assert.False(t, ok, "another bytecode index")
	_, ok = p.Cached(0x1000, 3, now.Add(recheck+time.Second))
	assert.False(t, ok, "stale")
}
