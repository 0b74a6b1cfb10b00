package sources

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"
)

// Run runs src against sink until ctx ends, flushing the sink's counted evidence every count
// window and once more when the source stops. It returns src.Run's error (nil when ctx ended),
// or the panic src.Run stopped with, as an error.
func Run(ctx context.Context, src Source, sink *Sink) error {
	if src.Name() != sink.Source() {
		return fmt.Errorf("run source %s: sink is for %s", src.Name(), sink.Source())
	}
	done := make(chan struct{})
	flushed := make(chan struct{})
	go func() {
		defer close(flushed)
		t := time.NewTicker(sink.counts.window)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if err := sink.Flush(ctx); err != nil && !errors.Is(err, context.Canceled) {
					sink.log.Warn("write counted evidence", "source", sink.Source(), "err", err)
				}
			}
		}
	}()
	err := runRecovered(ctx, src, sink)
	close(done)
	<-flushed
	// The last window is written even though ctx has ended.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if ferr := sink.Flush(fctx); ferr != nil {
		sink.log.Warn("write counted evidence", "source", sink.Source(), "err", ferr)
	}
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return nil
	}
	return err
}

// runRecovered runs src.Run and turns a panic in it into the error it stops with, logged with its
// stack: a bug in one source stops that instance, not the process and every other instance. (A
// panic in a goroutine the source starts itself is beyond reach.)
func runRecovered(ctx context.Context, src Source, sink *Sink) (err error) {
	defer func() {
		if p := recover(); p != nil {
			sink.log.Error("source panicked", "source", src.Name(), "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			err = fmt.Errorf("panicked: %v", p)
		}
	}()
	return src.Run(ctx, sink)
}
