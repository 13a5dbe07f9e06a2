package symbolize

import (
	"container/list"
	"time"
)

// lru is a small bounded least-recently-used map. Besides the number of
// entries it can bound their total weight (an estimate of the bytes each
// holds); the most recently used entry is never evicted for its weight. It is
// not safe for concurrent use; the Symbolizer's mutex guards it.
type lru[K comparable, V any] struct {
	max       int
	maxWeight int64 // 0: no bound
	weight    int64
	ll        *list.List // front = most recently used
	items     map[K]*list.Element
	onEvict   func(K, V)
	// now, when set, stamps each entry at its last use (expireBefore).
	now func() time.Time
}

type lruEntry[K comparable, V any] struct {
	key    K
	val    V
	weight int64
	used   time.Time // at its last use, when now is set
}

func newLRU[K comparable, V any](max int, onEvict func(K, V)) *lru[K, V] {
	if max < 1 {
		max = 1
	}
	return &lru[K, V]{max: max, ll: list.New(), items: make(map[K]*list.Element), onEvict: onEvict}
}

func (c *lru[K, V]) get(k K) (V, bool) {
	if e, ok := c.items[k]; ok {
		c.use(e)
		return e.Value.(*lruEntry[K, V]).val, true
	}
	var zero V
	return zero, false
}

func (c *lru[K, V]) add(k K, v V) {
	if e, ok := c.items[k]; ok {
		c.use(e)
		e.Value.(*lruEntry[K, V]).val = v
		return
	}
	c.items[k] = c.ll.PushFront(&lruEntry[K, V]{key: k, val: v})
	c.use(c.items[k])
	c.trim()
}

// use marks e most recently used.
func (c *lru[K, V]) use(e *list.Element) {
	c.ll.MoveToFront(e)
	if c.now != nil {
		e.Value.(*lruEntry[K, V]).used = c.now()
	}
}

// expireBefore removes the entries last used before t (with now set),
// least recently used first, and returns how many.
func (c *lru[K, V]) expireBefore(t time.Time) int {
	n := 0
	for e := c.ll.Back(); e != nil && e.Value.(*lruEntry[K, V]).used.Before(t); e = c.ll.Back() {
		c.removeElement(e)
		n++
	}
	return n
}

// setWeight sets the weight of k, marks it most recently used and evicts
// least recently used entries while the total is above the bound.
func (c *lru[K, V]) setWeight(k K, w int64) {
	e, ok := c.items[k]
	if !ok {
		return
	}
	c.use(e)
	ent := e.Value.(*lruEntry[K, V])
	c.weight += w - ent.weight
	ent.weight = w
	c.trim()
}

func (c *lru[K, V]) trim() {
	for c.ll.Len() > c.max || c.maxWeight > 0 && c.weight > c.maxWeight && c.ll.Len() > 1 {
		c.removeElement(c.ll.Back())
	}
}

func (c *lru[K, V]) remove(k K) {
	if e, ok := c.items[k]; ok {
		c.removeElement(e)
	}
}

func (c *lru[K, V]) removeElement(e *list.Element) {
	c.ll.Remove(e)
	ent := e.Value.(*lruEntry[K, V])
	delete(c.items, ent.key)
	c.weight -= ent.weight
	if c.onEvict != nil {
		c.onEvict(ent.key, ent.val)
	}
}

// each calls fn for every entry, most recently used first.
func (c *lru[K, V]) each(fn func(K, V)) {
	for e := c.ll.Front(); e != nil; e = e.Next() {
		ent := e.Value.(*lruEntry[K, V])
		fn(ent.key, ent.val)
	}
}

func (c *lru[K, V]) len() int { return c.ll.Len() }

func (c *lru[K, V]) clear() {
	for c.ll.Len() > 0 {
		c.removeElement(c.ll.Back())
	}
}

// onceSet remembers a bounded number of keys so that a problem with a file
// or process is logged once, not once per frame.
type onceSet struct {
	seen *lru[string, struct{}]
}

func newOnceSet(max int) *onceSet { return &onceSet{seen: newLRU[string, struct{}](max, nil)} }

// first reports whether key was not seen before (recently), and remembers it.
func (o *onceSet) first(key string) bool {
	if _, ok := o.seen.get(key); ok {
		return false
	}
	o.seen.add(key, struct{}{})
	return true
}
