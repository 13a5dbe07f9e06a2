package unwinder

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestRescanBackoffs(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	b := rescanBackoffs{}
	steps := []struct {
		name    string
		at      time.Duration
		due     bool
		changed bool // outcome of the rescan, when due
	}{
		{"first request", 0, true, false},
		{"within the first backoff", 3 * time.Second, false, false},
		{"after it", 4 * time.Second, true, false},
		{"within the doubled backoff", 11 * time.Second, false, false},
		{"after it, and it finds a new mapping", 12 * time.Second, true, true},
		{"reset: due at once", 12*time.Second + time.Millisecond, true, false},
	}
	for _, s := range steps {
		assert.Equal(t, s.due, b.due(1, at(s.at)), s.name)
		if s.due {
			b.done(1, at(s.at), s.changed)
		}
	}
	assert.True(t, b.due(2, t0), "another process is not held back")

	for range 10 {
		b.done(3, t0, false)
	}
	assert.Equal(t, maxRescanBackoff, b[3].wait, "bounded")
	b.forget(3)
	assert.True(t, b.due(3, t0), "forgotten at exit or exec")

	full := rescanBackoffs{}
	for pid := range uint32(maxRescanBackoffs) {
		full.done(pid+10, t0, false)
	}
	full.done(5, t0, false)
	assert.True(t, full.due(5, t0), "past the bound a process is not held back")
	assert.Len(t, full, maxRescanBackoffs)
}
