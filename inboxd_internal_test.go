package inboxd

import (
	"context"
	"errors"
	"testing"

	"github.com/inboxd/inboxd/handlers"
)

// TestCancelOnStop: StopAndCancel's middleware cancels the handlers that
// run when it is called, and those that start after, and leaves nothing
// behind once they returned.
func TestCancelOnStop(t *testing.T) {
	ib := &Inboxd{}
	inside := make(chan context.Context)
	release := make(chan struct{})
	h := ib.cancelOnStop(handlers.HandlerFunc(func(ctx context.Context, _ *handlers.Event) error {
		inside <- ctx
		<-release
		return nil
	}))
	returned := make(chan error)
	for i := range 3 {
		go func() { returned <- h.Handle(context.Background(), &handlers.Event{ID: int64(i)}) }()
	}
	var running []context.Context
	for range 3 {
		running = append(running, <-inside)
	}
	for _, ctx := range running {
		if ctx.Err() != nil {
			t.Fatalf("a handler's context ended before cancelAll: %v", context.Cause(ctx))
		}
	}
	ib.handlers.cancelAll()
	for _, ctx := range running {
		if !errors.Is(context.Cause(ctx), ErrStopAndCancel) {
			t.Errorf("a running handler's context: cause %v, want ErrStopAndCancel", context.Cause(ctx))
		}
	}
	go func() { returned <- h.Handle(context.Background(), &handlers.Event{ID: 7}) }()
	if late := <-inside; !errors.Is(context.Cause(late), ErrStopAndCancel) {
		t.Errorf("a handler started after cancelAll: cause %v, want ErrStopAndCancel", context.Cause(late))
	}
	close(release)
	for range 4 {
		if err := <-returned; err != nil {
			t.Errorf("handler returned %v", err)
		}
	}
	for i := range ib.handlers.shards {
		if n := len(ib.handlers.shards[i].cancels); n != 0 {
			t.Errorf("shard %d still holds %d cancel functions after the handlers returned", i, n)
		}
	}
}
