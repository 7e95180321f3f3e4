package tracing_test

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/handlers/tracing"
)

// wrappedNoop behaves as the no-op provider but is not of its type, so the
// middleware takes its general path: what tracing costs with a provider
// that records nothing but cannot be recognised (the global one before it
// is set, say).
type wrappedNoop struct{ noop.TracerProvider }

// BenchmarkMiddleware measures one attempt through the middleware against
// the bare handler, with an event that carries a traceparent.
func BenchmarkMiddleware(b *testing.B) {
	ev := event(map[string]string{
		"traceparent": traceparent, "tracestate": tracestate,
		"event_id": "evt-1", "event_type": "order.created", "content-type": "application/json",
	})
	bare := handlers.HandlerFunc(func(context.Context, *handlers.Event) error { return nil })

	sdk := func(opts ...sdktrace.TracerProviderOption) trace.TracerProvider {
		tp := sdktrace.NewTracerProvider(opts...)
		b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		return tp
	}
	for _, bc := range []struct {
		name string
		h    handlers.Handler
	}{
		{"none", bare},
		{"noop", handlers.Chain(bare, tracing.Middleware(noop.NewTracerProvider()))},
		{"noop-unrecognised", handlers.Chain(bare, tracing.Middleware(wrappedNoop{}))},
		{"sdk-not-sampled", handlers.Chain(bare, tracing.Middleware(sdk(sdktrace.WithSampler(sdktrace.NeverSample()))))},
		{"sdk-sampled-batch", handlers.Chain(bare, tracing.Middleware(sdk(sdktrace.WithBatcher(tracetest.NewNoopExporter()))))},
	} {
		b.Run(bc.name, func(b *testing.B) {
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if err := bc.h.Handle(ctx, ev); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
