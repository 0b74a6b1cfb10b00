// Package wakecount keeps a store driver's count of pending wakes for the transaction in
// progress, so that the admission bound (a count per acceptance) reads the wakes once per
// transaction, not once per acceptance.
package wakecount

// Pending is the count of pending wakes as one transaction sees it. The driver sets it from a
// read, adds each pending wake the transaction inserts, and forgets it at any other change to the
// wakes, at a failed statement and at a rolled-back savepoint; the next count then reads again.
// The zero value knows nothing.
type Pending struct {
	known bool
	n     int
	exact bool // n is the count; otherwise the count is at least n (a count capped by its upTo)
}

// Get returns the count capped at upTo (no cap when upTo <= 0), if it is known well enough to
// answer.
func (c *Pending) Get(upTo int) (int, bool) {
	switch {
	case !c.known:
		return 0, false
	case upTo <= 0: // no cap
		return c.n, c.exact
	case !c.exact && c.n < upTo:
		return 0, false
	}
	return min(c.n, upTo), true
}

// Set records a count read with cap upTo.
func (c *Pending) Set(n, upTo int) {
	c.known, c.n, c.exact = true, n, upTo <= 0 || n < upTo
}

// Add counts a pending wake the transaction inserted.
func (c *Pending) Add() {
	if c.known {
		c.n++
	}
}

// Forget drops the count.
func (c *Pending) Forget() { c.known = false }

// Count returns the count capped at upTo, from c when it is known well enough, or else from
// read, which counts with the same cap and whose answer c then keeps.
func (c *Pending) Count(upTo int, read func(upTo int) (int, error)) (int, error) {
	if n, ok := c.Get(upTo); ok {
		return n, nil
	}
	n, err := read(upTo)
	if err == nil {
		c.Set(n, upTo)
	}
	return n, err
}
