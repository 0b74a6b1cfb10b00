package storetest

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/channels-dev/channels/taskplane/store"
)

// ErrBlip is the failure a Blip returns: what a pooled connection a database restart cut says.
var ErrBlip = errors.New("begin: FATAL: terminating connection due to administrator command (SQLSTATE 57P01)")

// Blip is a store whose first Update made from within a function whose name contains In (as the
// stack shows it: "(*Turn).RecordOutput") fails with ErrBlip, once; every other call goes
// through. The test fails if no Update ever matched (it would prove nothing).
type Blip struct {
	store.Store
	In    string
	once  sync.Once
	fired atomic.Bool
}

// NewBlip wraps s in a Blip for calls from within in, checked when the test ends.
func NewBlip(t testing.TB, s store.Store, in string) *Blip {
	b := &Blip{Store: s, In: in}
	t.Cleanup(func() {
		if !b.fired.Load() {
			t.Errorf("no store write was made from within %s: the blip never fired, and the test proved nothing", in)
		}
	})
	return b
}

// Update fails the first call from within b.In; the others go to the store.
func (b *Blip) Update(ctx context.Context, fn func(ctx context.Context, tx store.Tx) error) error {
	buf := make([]byte, 1<<16)
	if strings.Contains(string(buf[:runtime.Stack(buf, false)]), b.In) {
		fire := false
		b.once.Do(func() { fire = true })
		if fire {
			b.fired.Store(true)
			return ErrBlip
		}
	}
	return b.Store.Update(ctx, fn)
}
