package a2aservice

import "sync"

// slots counts what holds one of a bounded number of slots (open streams, blocking sends
// waiting), in total and per principal.
type slots struct {
	mu      sync.Mutex
	total   int
	per     map[string]int
	refused [serverFull + 1]int64 // refusals so far, by the bound that refused
}

// full says which bound refused a slot.
type full int

const (
	notFull       full = iota
	principalFull      // the principal holds its limit
	serverFull         // the server holds its limit
)

// take holds a slot of principal unless the principal already holds perPrincipal of them or the
// server total; it then reports which bound refused it. The returned func gives the slot back
// (once, however often it is called).
func (sl *slots) take(principal string, perPrincipal, total int) (func(), full) {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	switch {
	case sl.per[principal] >= perPrincipal:
		sl.refused[principalFull]++
		return nil, principalFull
	case sl.total >= total:
		sl.refused[serverFull]++
		return nil, serverFull
	}
	if sl.per == nil {
		sl.per = map[string]int{}
	}
	sl.total++
	sl.per[principal]++
	var once sync.Once
	return func() {
		once.Do(func() {
			sl.mu.Lock()
			defer sl.mu.Unlock()
			sl.total--
			if sl.per[principal]--; sl.per[principal] <= 0 {
				delete(sl.per, principal)
			}
		})
	}, notFull
}

// held reports how many slots are held now.
func (sl *slots) held() int {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	return sl.total
}

// refusedBy reports how many slots bound f has refused so far.
func (sl *slots) refusedBy(f full) int64 {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	return sl.refused[f]
}
