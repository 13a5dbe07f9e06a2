package bpfprofilerreceiver

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestExitQueue(t *testing.T) {
	var q exitQueue
	q.add(1)
	q.add(2)
	pids, overflow := q.take()
	assert.Equal(t, []uint32{1, 2}, pids)
	assert.False(t, overflow)
	pids, overflow = q.take()
	assert.Empty(t, pids)
	assert.False(t, overflow)

	for i := range maxQueuedExits + 5 {
		q.add(uint32(i))
	}
	pids, overflow = q.take()
	assert.Len(t, pids, maxQueuedExits)
	assert.True(t, overflow, "the exits that did not fit make the report check every process")
	_, overflow = q.take()
	assert.False(t, overflow)
}
