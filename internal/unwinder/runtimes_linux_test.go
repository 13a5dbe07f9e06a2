package unwinder

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// A runtime not ready is asked again quickly in its first seconds (a node
// beside busy programs makes its isolate in a few), then at most a sweep
// apart; no shift overflows however many tries.
func TestRuntimeRetryGap(t *testing.T) {
	since := time.Unix(1_700_000_000, 0)
	for _, tt := range []struct {
		tries  int
		waited time.Duration
		want   time.Duration
	}{
		{1, 150 * time.Millisecond, 200 * time.Millisecond},
		{2, 400 * time.Millisecond, 400 * time.Millisecond},
		{3, time.Second, runtimeQuickGap},
		{12, 9 * time.Second, runtimeQuickGap},
		{13, 11 * time.Second, sweepInterval},
		{1, 11 * time.Second, 200 * time.Millisecond},
		{200, 50 * time.Second, sweepInterval},
	} {
		assert.Equal(t, tt.want, runtimeRetryGap(tt.tries, since, since.Add(tt.waited)), "%+v", tt)
	}
}
