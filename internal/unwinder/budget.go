package unwinder

// tableBudget hands out the slots of the array of tables (bpf/unwind.h
// unwind_files) and keeps the rows of all tables within a budget. Each
// table is its own kernel allocation, so freed tables leave no holes: a
// table fits whenever the rows it needs are left, whatever came and went.
// A mappable table costs the kernel whole pages: a page for its header and
// its rows rounded up to pages, charged as rows (pageRows a page).
type tableBudget struct {
	slots    uint32   // slots of the array
	next     uint32   // slots below next were handed out at least once
	free     []uint32 // slots given back, reused last in first out
	used     uint64   // rows charged for the tables loaded
	capacity uint64   // rows allowed
	pageRows uint64   // rows a page holds, for mappable tables; 0: rows are charged as they are
}

func newTableBudget(slots uint32, rows uint64) *tableBudget {
	return &tableBudget{slots: slots, capacity: rows}
}

// charge is what a table of n rows takes of the budget.
func (b *tableBudget) charge(n uint32) uint64 {
	if b.pageRows == 0 {
		return uint64(n)
	}
	return (uint64(n)+b.pageRows-1)/b.pageRows*b.pageRows + b.pageRows
}

// alloc takes a slot for a table of n rows; false when either the rows or
// the slots are used up.
func (b *tableBudget) alloc(n uint32) (uint32, bool) {
	if n == 0 || b.used+b.charge(n) > b.capacity {
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
	b.used += b.charge(n)
	return slot, true
}

// releaseRows gives back a table's n rows (its memory is freed with it).
func (b *tableBudget) releaseRows(n uint32) { b.used -= b.charge(n) }

// releaseSlot gives back a slot, for a table no walk can still look up.
func (b *tableBudget) releaseSlot(slot uint32) { b.free = append(b.free, slot) }
