package unwinder

import (
	"errors"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bpfprofiler/bpfprofiler/internal/capture"
)

func TestTableBudget(t *testing.T) {
	b := newTableBudget(3, 100)
	a, ok := b.alloc(40)
	require.True(t, ok)
	c, ok := b.alloc(40)
	require.True(t, ok)
	assert.Equal(t, []uint32{0, 1}, []uint32{a, c})
	_, ok = b.alloc(30)
	assert.False(t, ok, "only 20 rows are left")

	// Freed rows are usable at once, whatever the order: no fragments.
	b.releaseRows(40)
	d, ok := b.alloc(30)
	require.True(t, ok)
	assert.Equal(t, uint32(2), d, "a slot never used, the freed one not given back yet")
	_, ok = b.alloc(10)
	assert.False(t, ok, "every slot is taken")
	b.releaseSlot(a)
	e, ok := b.alloc(10)
	require.True(t, ok)
	assert.Equal(t, a, e, "a slot given back is reused")
	assert.Equal(t, uint64(80), b.used)

	_, ok = b.alloc(0)
	assert.False(t, ok, "an empty table takes no slot")
}

func TestTableBudgetChargesPages(t *testing.T) {
	b := newTableBudget(4, 4*512)
	b.pageRows = 512 // 4 KiB pages of 8-byte rows
	for _, tt := range []struct {
		rows uint32
		want uint64
	}{{1, 1024}, {512, 1024}, {513, 1536}} {
		assert.Equal(t, tt.want, b.charge(tt.rows), "%d rows", tt.rows)
	}
	_, ok := b.alloc(1)
	require.True(t, ok)
	_, ok = b.alloc(513)
	assert.False(t, ok, "a header page and two pages of rows do not fit in the three pages left")
	_, ok = b.alloc(512)
	require.True(t, ok)
	assert.Equal(t, uint64(2048), b.used)
	b.releaseRows(1)
	assert.Equal(t, uint64(1024), b.used, "a table gives back what it was charged")
}

func TestFailureNotesFirstOfEachReason(t *testing.T) {
	var n failureNotes
	for _, c := range []struct {
		reason capture.TableFailure
		path   string
	}{{capture.TableSpaceFull, "/a"}, {capture.TableSpaceFull, "/b"}, {capture.TableOpenFailed, "/c"}, {capture.TableSpaceFull, "/d"}} {
		n.note(c.reason, c.path, errors.New(c.reason.Reason()))
	}
	if got, want := n.take(), []string{"/a: space_full", "/c: open_failed"}; !slices.Equal(got, want) {
		t.Errorf("first take %q, want %q", got, want)
	}
	n.note(capture.TableSpaceFull, "/e", errors.New("space_full"))
	n.note(capture.TableTooLarge, "/f", errors.New("too_large"))
	if got, want := n.take(), []string{"/f: too_large"}; !slices.Equal(got, want) {
		t.Errorf("second take %q, want %q", got, want)
	}
}
