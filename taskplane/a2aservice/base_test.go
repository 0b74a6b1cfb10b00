package a2aservice

import (
	"context"
	"testing"
)

// TestARequestAfterCloseStartsCanceled: a request that begins after Close has its context
// already canceled, not a moment later from AfterFunc's goroutine; a stream served meanwhile
// would start writing an event that the cancellation then cuts off mid-frame.
func TestARequestAfterCloseStartsCanceled(t *testing.T) {
	s := &Service{}
	s.base, s.stop = context.WithCancel(context.Background())
	ctx, cancel := s.withBase(context.Background())
	if ctx.Err() != nil {
		t.Fatal("a request's context is canceled before Close")
	}
	cancel()
	s.Close()
	ctx, cancel = s.withBase(context.Background())
	defer cancel()
	if ctx.Err() == nil {
		t.Fatal("a request's context after Close is not canceled at once")
	}
}
