package unwinder

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestDeferredLoads(t *testing.T) {
	var d deferredLoads
	t0 := time.Unix(1000, 0)
	_, ok := d.next()
	assert.False(t, ok)

	assert.True(t, d.add(1, t0))
	assert.True(t, d.add(2, t0.Add(10*time.Millisecond)))
	assert.True(t, d.add(3, t0.Add(20*time.Millisecond)))
	next, ok := d.next()
	assert.True(t, ok)
	assert.Equal(t, t0.Add(loadDelay), next)

	assert.True(t, d.cancel(2), "2 exited within loadDelay: never loaded")
	assert.False(t, d.cancel(2))
	assert.Empty(t, d.take(t0.Add(loadDelay-time.Millisecond)), "nothing due yet")
	assert.Equal(t, []uint32{1}, d.take(t0.Add(loadDelay)))
	next, _ = d.next()
	assert.Equal(t, t0.Add(20*time.Millisecond+loadDelay), next, "the cancelled 2 is skipped")

	// 3 announced again (its pid reused after an exit and a new process):
	// due once, at the later time.
	d.cancel(3)
	assert.True(t, d.add(3, t0.Add(50*time.Millisecond)))
	assert.Empty(t, d.take(t0.Add(20*time.Millisecond+loadDelay)), "the stale entry of 3 loads nothing")
	assert.Equal(t, []uint32{3}, d.take(t0.Add(time.Second)))
	_, ok = d.next()
	assert.False(t, ok)
	assert.Nil(t, d.order)

	for i := range maxDeferredLoads {
		assert.True(t, d.add(uint32(i), t0))
	}
	assert.False(t, d.add(1<<20, t0), "full: the caller loads at once")
	assert.Len(t, d.take(t0.Add(loadDelay)), maxDeferredLoads)
}
