package unwinder

// tableBudget hands out the slots of the array of tables (bpf/unwind.h
// unwind_files) and keeps the rows of all tables within a budget. Each
// table is its own kernel allocation, so freed tables leave no holes: a
// table fits whenever the rows it needs are left, whatever came and went.
type tableBudget struct {
	slots    uint32   // slots of the array
	next     uint32   // slots below next were handed out at least once
	free     []uint32 // slots given back, reused last in first out
	used     uint64   // rows of the tables loaded
	capacity uint64   // rows allowed
}

func newTableBudget(slots uint32, rows uint64) *tableBudget {
	return &tableBudget{slots: slots, capacity: rows}
}

// alloc takes a slot for a table of n rows; false when either the rows or
// the slots are used up.
func (b *tableBudget) alloc(n uint32) (uint32, bool) {
	if n == 0 || b.used+uint64(n) > b.capacity {
		return 0, false
	}
	var slot uint32
	switch {
	case len(b.free) > 0:
		slot = b.free[len(b.free)-1]
		b.free = b.free[:len(b.free)-1]
	case b.next < b.slots:
		slot = b.next
		b.next++
	default:
		return 0, false
	}
	b.used += uint64(n)
	return slot, true
}

// releaseRows gives back a table's n rows (its memory is freed with it).
func (b *tableBudget) releaseRows(n uint32) { b.used -= uint64(n) }

// releaseSlot gives back a slot, for a table no walk can still look up.
func (b *tableBudget) releaseSlot(slot uint32) { b.free = append(b.free, slot) }
