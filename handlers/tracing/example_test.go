package tracing_test

import (
	"context"
	"fmt"
	"log"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/handlers/tracing"
)

// Trace every handler of a registry. The event carries the producer's
// trace context in its Kafka headers, so the attempt's span joins the
// producer's trace, and the handler's own span is a child of the attempt's.
// Here the spans go to an in-memory exporter; a program gets its provider
// from its OpenTelemetry set-up (the daemon's reads the OTEL_* variables).
func ExampleMiddleware() {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()

	reg := handlers.NewRegistry()
	reg.Use(tracing.Middleware(tp, tracing.KafkaTopics("orders")))
	err := reg.HandleFunc("order.created", func(ctx context.Context, ev *handlers.Event) error {
		_, span := trace.SpanFromContext(ctx).TracerProvider().Tracer("orders").Start(ctx, "reserve stock")
		defer span.End()
		return handlers.Permanent(fmt.Errorf("unknown sku in %s", ev.Payload))
	})
	if err != nil {
		log.Fatal(err)
	}

	ev := &handlers.Event{
		ID: 7, Source: "orders", EventID: "evt-1", EventType: "order.created", Attempt: 1,
		Payload: []byte(`{"sku":"Z-9"}`),
		Headers: map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
	}
	err = reg.Lookup(ev.EventType).Handler.Handle(context.Background(), ev)
	fmt.Println("handler:", err)

	spans := exp.GetSpans() // in the order they ended
	child, attempt := spans[0], spans[1]
	fmt.Println(attempt.Name, attempt.SpanKind, attempt.SpanContext.TraceID(), "parent", attempt.Parent.SpanID())
	fmt.Println(attempt.Status.Code, attempt.Status.Description)
	for _, kv := range attempt.Attributes {
		fmt.Printf("  %s=%s\n", kv.Key, kv.Value.String())
	}
	fmt.Println(child.Name, "is a child of the attempt:", child.Parent.SpanID() == attempt.SpanContext.SpanID())
	// Output:
	// handler: unknown sku in {"sku":"Z-9"}
	// inboxd order.created consumer 4bf92f3577b34da6a3ce929d0e0e4736 parent 00f067aa0ba902b7
	// Error unknown sku in {"sku":"Z-9"}
	//   messaging.system=kafka
	//   messaging.destination.name=orders
	//   messaging.operation.type=process
	//   messaging.operation.name=process
	//   messaging.message.id=evt-1
	//   messaging.message.body.size=13
	//   inboxd.event.type=order.created
	//   inboxd.event.source=orders
	//   inboxd.attempt=1
	//   inboxd.row.id=7
	//   inboxd.error.permanent=true
	//   error.type=permanent
	// reserve stock is a child of the attempt: true
}
