package tracing_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/handlers/tracing"
)

// A W3C trace context as a producer would put it in the Kafka headers.
const (
	traceID     = "4bf92f3577b34da6a3ce929d0e0e4736"
	parentID    = "00f067aa0ba902b7"
	traceparent = "00-" + traceID + "-" + parentID + "-01"
	tracestate  = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
)

// newProvider returns an SDK provider that hands every ended span to the
// returned exporter at once.
func newProvider(t *testing.T) (*sdktrace.TracerProvider, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, exp
}

func event(headers map[string]string) *handlers.Event {
	return &handlers.Event{
		ID:         42,
		Source:     "orders",
		EventID:    "evt-1",
		EventType:  "order.created",
		Payload:    []byte(`{"sku":"A-1"}`),
		Headers:    headers,
		Attempt:    3,
		ReceivedAt: time.Now(),
	}
}

// oneSpan returns the only span exported.
func oneSpan(t *testing.T, exp *tracetest.InMemoryExporter) tracetest.SpanStub {
	t.Helper()
	spans := exp.GetSpans()
	if len(spans) != 1 {
		t.Fatalf("%d spans exported, want 1: %+v", len(spans), spans)
	}
	return spans[0]
}

func attrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := make(map[attribute.Key]attribute.Value, len(s.Attributes))
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

func TestSpanIsChildOfTraceparent(t *testing.T) {
	tp, exp := newProvider(t)
	var inHandler trace.SpanContext
	h := handlers.Chain(handlers.HandlerFunc(func(ctx context.Context, ev *handlers.Event) error {
		inHandler = trace.SpanContextFromContext(ctx)
		return nil
	}), tracing.Middleware(tp))

	if err := h.Handle(context.Background(), event(map[string]string{
		"traceparent": traceparent, "tracestate": tracestate, "event_id": "evt-1",
	})); err != nil {
		t.Fatal(err)
	}

	s := oneSpan(t, exp)
	if got := s.Parent.TraceID().String(); got != traceID {
		t.Errorf("parent trace id %s, want %s", got, traceID)
	}
	if got := s.Parent.SpanID().String(); got != parentID {
		t.Errorf("parent span id %s, want %s", got, parentID)
	}
	if !s.Parent.IsRemote() {
		t.Error("parent is not remote")
	}
	if got := s.SpanContext.TraceID().String(); got != traceID {
		t.Errorf("span's trace id %s, want %s", got, traceID)
	}
	if s.SpanContext.SpanID().String() == parentID {
		t.Error("span has its parent's id")
	}
	if got := s.SpanContext.TraceState().String(); got != tracestate {
		t.Errorf("tracestate %q, want %q", got, tracestate)
	}
	if !inHandler.Equal(s.SpanContext) {
		t.Errorf("handler's context carries span %v, want the middleware's %v", inHandler, s.SpanContext)
	}
	if len(s.Links) != 1 || s.Links[0].SpanContext.SpanID().String() != parentID {
		t.Errorf("links %+v, want one to the creation context", s.Links)
	}
	if s.Name != "inboxd order.created" {
		t.Errorf("name %q", s.Name)
	}
	if s.SpanKind != trace.SpanKindConsumer {
		t.Errorf("kind %v, want consumer", s.SpanKind)
	}
	if s.Status.Code != codes.Unset {
		t.Errorf("status %+v, want unset", s.Status)
	}
	if s.InstrumentationScope.Name != tracing.ScopeName {
		t.Errorf("scope %q", s.InstrumentationScope.Name)
	}
	want := map[attribute.Key]attribute.Value{
		"messaging.system":            attribute.StringValue("inbox"),
		"messaging.operation.type":    attribute.StringValue("process"),
		"messaging.operation.name":    attribute.StringValue("process"),
		"messaging.message.id":        attribute.StringValue("evt-1"),
		"messaging.message.body.size": attribute.IntValue(len(`{"sku":"A-1"}`)),
		tracing.AttrEventType:         attribute.StringValue("order.created"),
		tracing.AttrEventSource:       attribute.StringValue("orders"),
		tracing.AttrAttempt:           attribute.IntValue(3),
		tracing.AttrRowID:             attribute.Int64Value(42),
	}
	got := attrs(s)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("attribute %s = %v, want %v", k, got[k].String(), v.String())
		}
	}
	if len(got) != len(want) {
		t.Errorf("attributes %v, want exactly %v", got, want)
	}
}

func TestKafkaTopics(t *testing.T) {
	tp, exp := newProvider(t)
	h := handlers.Chain(handlers.Ignore(), tracing.Middleware(tp, tracing.KafkaTopics("payments", "orders")))
	for _, src := range []string{"orders", "billing"} {
		ev := event(nil)
		ev.Source = src
		if err := h.Handle(context.Background(), ev); err != nil {
			t.Fatal(err)
		}
	}
	spans := exp.GetSpans()
	if len(spans) != 2 {
		t.Fatalf("%d spans", len(spans))
	}
	kafka, inbox := attrs(spans[0]), attrs(spans[1])
	if kafka["messaging.system"].AsString() != "kafka" || kafka["messaging.destination.name"].AsString() != "orders" {
		t.Errorf("topic orders: %v", kafka)
	}
	if inbox["messaging.system"].AsString() != "inbox" {
		t.Errorf("source billing: %v", inbox)
	}
	if _, ok := inbox["messaging.destination.name"]; ok {
		t.Errorf("source billing has a destination name: %v", inbox)
	}
}

func TestHeaderNameAnyCase(t *testing.T) {
	tp, exp := newProvider(t)
	h := handlers.Chain(handlers.Ignore(), tracing.Middleware(tp))
	if err := h.Handle(context.Background(), event(map[string]string{"Traceparent": traceparent})); err != nil {
		t.Fatal(err)
	}
	if got := oneSpan(t, exp).Parent.SpanID().String(); got != parentID {
		t.Errorf("parent span id %s, want %s from header Traceparent", got, parentID)
	}
}

func TestRootSpanWithoutTraceparent(t *testing.T) {
	for name, headers := range map[string]map[string]string{
		"no headers":          nil,
		"other headers":       {"event_id": "evt-1", "tracestate": tracestate},
		"invalid traceparent": {"traceparent": "00-zz-yy-01"},
		"zero trace id":       {"traceparent": "00-00000000000000000000000000000000-" + parentID + "-01"},
	} {
		t.Run(name, func(t *testing.T) {
			tp, exp := newProvider(t)
			h := handlers.Chain(handlers.Ignore(), tracing.Middleware(tp))
			if err := h.Handle(context.Background(), event(headers)); err != nil {
				t.Fatal(err)
			}
			s := oneSpan(t, exp)
			if s.Parent.IsValid() {
				t.Errorf("parent %v, want none (a root span)", s.Parent)
			}
			if !s.SpanContext.IsValid() || s.SpanContext.TraceID().String() == traceID {
				t.Errorf("span context %v, want a new trace", s.SpanContext)
			}
			if len(s.Links) != 0 {
				t.Errorf("links %+v, want none", s.Links)
			}
		})
	}
}

func TestErrorsRecorded(t *testing.T) {
	retry := errors.New("sink said 503")
	perm := handlers.Permanent(errors.New("bad sku"))
	later := handlers.RetryAfter(90*time.Second, errors.New("rate limited"))
	for _, tc := range []struct {
		err        error
		permanent  bool
		errType    string
		retryAfter float64
	}{
		{retry, false, "retryable", 0},
		{perm, true, "permanent", 0},
		{later, false, "retryable", 90},
	} {
		t.Run(tc.err.Error(), func(t *testing.T) {
			tp, exp := newProvider(t)
			h := handlers.Chain(handlers.HandlerFunc(func(context.Context, *handlers.Event) error { return tc.err }), tracing.Middleware(tp))
			err := h.Handle(context.Background(), event(map[string]string{"traceparent": traceparent}))
			if err != tc.err {
				t.Fatalf("middleware returned %v, want the handler's error itself", err)
			}
			s := oneSpan(t, exp)
			if s.Status.Code != codes.Error || s.Status.Description != tc.err.Error() {
				t.Errorf("status %+v, want Error %q", s.Status, tc.err.Error())
			}
			if len(s.Events) != 1 || s.Events[0].Name != "exception" {
				t.Fatalf("events %+v, want one exception", s.Events)
			}
			var msg string
			for _, kv := range s.Events[0].Attributes {
				if kv.Key == "exception.message" {
					msg = kv.Value.AsString()
				}
			}
			if msg != tc.err.Error() {
				t.Errorf("exception.message %q, want %q", msg, tc.err.Error())
			}
			a := attrs(s)
			if v, ok := a[tracing.AttrPermanent]; !ok || v.AsBool() != tc.permanent {
				t.Errorf("%s = %v (set: %v), want %v", tracing.AttrPermanent, v.AsBool(), ok, tc.permanent)
			}
			if got := a["error.type"].AsString(); got != tc.errType {
				t.Errorf("error.type %q, want %q", got, tc.errType)
			}
			if v, ok := a[tracing.AttrRetryAfter]; ok != (tc.retryAfter > 0) || v.AsFloat64() != tc.retryAfter {
				t.Errorf("%s = %v (set: %v), want %v", tracing.AttrRetryAfter, v.AsFloat64(), ok, tc.retryAfter)
			}
		})
	}

	t.Run("success has no error attributes", func(t *testing.T) {
		tp, exp := newProvider(t)
		h := handlers.Chain(handlers.Ignore(), tracing.Middleware(tp))
		if err := h.Handle(context.Background(), event(nil)); err != nil {
			t.Fatal(err)
		}
		s := oneSpan(t, exp)
		a := attrs(s)
		if _, ok := a[tracing.AttrPermanent]; ok || len(s.Events) != 0 || s.Status.Code != codes.Unset {
			t.Errorf("a successful attempt: attributes %v, events %+v, status %+v", a, s.Events, s.Status)
		}
	})
}

func TestPanicRecordedAndPropagated(t *testing.T) {
	tp, exp := newProvider(t)
	h := handlers.Chain(handlers.HandlerFunc(panickingHandler), tracing.Middleware(tp))

	var recovered any
	var stack string
	func() {
		defer func() {
			recovered = recover()
			stack = string(debug.Stack())
		}()
		_ = h.Handle(context.Background(), event(nil))
	}()

	if recovered != "boom" {
		t.Fatalf("recovered %v, want the handler's panic value", recovered)
	}
	// The engine's recovery logs debug.Stack(): the frame that panicked must
	// still be in it.
	if !strings.Contains(stack, "panickingHandler") {
		t.Errorf("stack after the middleware lost the panicking frame:\n%s", stack)
	}
	s := oneSpan(t, exp)
	if s.Status.Code != codes.Error || len(s.Events) != 1 || s.Events[0].Name != "exception" {
		t.Errorf("status %+v, events %+v: want Error and an exception", s.Status, s.Events)
	}
}

func panickingHandler(context.Context, *handlers.Event) error { panic("boom") }

func TestGoexitEndsSpanWithoutPanic(t *testing.T) {
	tp, exp := newProvider(t)
	h := handlers.Chain(handlers.HandlerFunc(func(context.Context, *handlers.Event) error {
		runtime.Goexit()
		return nil
	}), tracing.Middleware(tp))

	var wg sync.WaitGroup
	var recovered any
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer func() { recovered = recover() }()
		_ = h.Handle(context.Background(), event(nil))
	}()
	wg.Wait()
	if recovered != nil {
		t.Fatalf("Goexit turned into a panic: %v", recovered)
	}
	if s := oneSpan(t, exp); s.Status.Code != codes.Error {
		t.Errorf("status %+v, want Error", s.Status)
	}
}

func TestHandlerSpanIsChild(t *testing.T) {
	tp, exp := newProvider(t)
	h := handlers.Chain(handlers.HandlerFunc(func(ctx context.Context, ev *handlers.Event) error {
		// Handler code gets its tracer from the span in its context (or
		// from otel.Tracer once the set-up made the provider global).
		tr := trace.SpanFromContext(ctx).TracerProvider().Tracer("orders-service")
		_, child := tr.Start(ctx, "reserve stock")
		child.End()
		return nil
	}), tracing.Middleware(tp))
	if err := h.Handle(context.Background(), event(map[string]string{"traceparent": traceparent})); err != nil {
		t.Fatal(err)
	}

	spans := exp.GetSpans() // in the order they ended: child first
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2", len(spans))
	}
	child, span := spans[0], spans[1]
	if child.Name != "reserve stock" || span.Name != "inboxd order.created" {
		t.Fatalf("spans %q, %q", child.Name, span.Name)
	}
	if child.Parent.SpanID() != span.SpanContext.SpanID() || child.Parent.IsRemote() {
		t.Errorf("child's parent %v, want the middleware's span %v", child.Parent, span.SpanContext)
	}
	if child.SpanContext.TraceID().String() != traceID {
		t.Errorf("child's trace %s, want the producer's %s", child.SpanContext.TraceID(), traceID)
	}
}

// mark is middleware that notes, in calls, that it ran and whether its
// context carried a recording span.
func mark(name string, calls *[]string) handlers.Middleware {
	return func(next handlers.Handler) handlers.Handler {
		return handlers.HandlerFunc(func(ctx context.Context, ev *handlers.Event) error {
			*calls = append(*calls, fmt.Sprintf("%s span=%v", name, trace.SpanFromContext(ctx).IsRecording()))
			return next.Handle(ctx, ev)
		})
	}
}

func TestRegistryUseOrder(t *testing.T) {
	tp, exp := newProvider(t)
	var calls []string
	reg := handlers.NewRegistry()
	handler := func(ctx context.Context, ev *handlers.Event) error {
		calls = append(calls, fmt.Sprintf("handler %s span=%v", ev.EventType, trace.SpanFromContext(ctx).IsRecording()))
		return nil
	}
	// Registered before and after Use: both get the middleware.
	if err := reg.HandleFunc("before", handler); err != nil {
		t.Fatal(err)
	}
	reg.Use(mark("outer", &calls), tracing.Middleware(tp), mark("inner", &calls))
	if err := reg.HandleFunc("after", handler); err != nil {
		t.Fatal(err)
	}
	type fakeTx struct{ pgx.Tx }
	tx := fakeTx{}
	if err := reg.HandleTx("tx", handlers.TxHandlerFunc(func(ctx context.Context, got pgx.Tx, ev *handlers.Event) error {
		if got != tx {
			t.Errorf("transactional handler got tx %v, want the engine's", got)
		}
		return handler(ctx, ev)
	})); err != nil {
		t.Fatal(err)
	}

	for _, typ := range []string{"before", "after", "tx"} {
		ev := event(nil)
		ev.EventType = typ
		if err := reg.Lookup(typ).Handler.Handle(handlers.ContextWithTx(context.Background(), tx), ev); err != nil {
			t.Fatal(err)
		}
	}
	// The default route is wrapped too.
	ev := event(nil)
	ev.EventType = "unrouted"
	if err := reg.Lookup("unrouted").Handler.Handle(context.Background(), ev); !handlers.IsPermanent(err) {
		t.Fatalf("default route: %v", err)
	}

	want := []string{
		"outer span=false", "inner span=true", "handler before span=true",
		"outer span=false", "inner span=true", "handler after span=true",
		"outer span=false", "inner span=true", "handler tx span=true",
		"outer span=false", "inner span=true",
	}
	if strings.Join(calls, "\n") != strings.Join(want, "\n") {
		t.Errorf("calls:\n%s\nwant:\n%s", strings.Join(calls, "\n"), strings.Join(want, "\n"))
	}
	var names []string
	for _, s := range exp.GetSpans() {
		names = append(names, s.Name)
	}
	if got := strings.Join(names, ","); got != "inboxd before,inboxd after,inboxd tx,inboxd unrouted" {
		t.Errorf("spans %s", got)
	}
	if s := exp.GetSpans()[3]; s.Status.Code != codes.Error || !attrs(s)[tracing.AttrPermanent].AsBool() {
		t.Errorf("default route's span: status %+v, attributes %v", s.Status, attrs(s))
	}
}

// countingHandler is comparable, so that the test can tell whether the
// middleware returned it unwrapped.
type countingHandler struct{ n int }

func (h *countingHandler) Handle(context.Context, *handlers.Event) error { h.n++; return nil }

func TestNoopProviderLeavesHandlerAlone(t *testing.T) {
	h := &countingHandler{}
	got := tracing.Middleware(noop.NewTracerProvider())(h)
	if got != handlers.Handler(h) {
		t.Fatalf("with a no-op provider the middleware wrapped the handler: %T", got)
	}
	if err := got.Handle(context.Background(), event(map[string]string{"traceparent": traceparent})); err != nil || h.n != 1 {
		t.Fatalf("handler ran %d times, err %v", h.n, err)
	}
}

func TestNilProviderIsGlobal(t *testing.T) {
	tp, exp := newProvider(t)
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(noop.NewTracerProvider()) })

	h := handlers.Chain(handlers.Ignore(), tracing.Middleware(nil))
	if err := h.Handle(context.Background(), event(map[string]string{"traceparent": traceparent})); err != nil {
		t.Fatal(err)
	}
	if got := oneSpan(t, exp).Parent.SpanID().String(); got != parentID {
		t.Errorf("parent %s, want %s", got, parentID)
	}
}

// Rows from RabbitMQ queues and NATS streams name their broker too.
func TestBrokerSources(t *testing.T) {
	tp, exp := newProvider(t)
	h := handlers.Chain(handlers.Ignore(), tracing.Middleware(tp,
		tracing.KafkaTopics("orders"), tracing.RabbitMQQueues("payments"), tracing.NATSStreams("events")))
	for _, src := range []string{"orders", "payments", "events", "billing"} {
		ev := event(nil)
		ev.Source = src
		if err := h.Handle(context.Background(), ev); err != nil {
			t.Fatal(err)
		}
	}
	spans := exp.GetSpans()
	if len(spans) != 4 {
		t.Fatalf("%d spans", len(spans))
	}
	for i, want := range []struct{ system, destination string }{
		{tracing.SystemKafka, "orders"}, {tracing.SystemRabbitMQ, "payments"}, {tracing.SystemNATS, "events"}, {tracing.SystemInbox, ""},
	} {
		a := attrs(spans[i])
		if a["messaging.system"].AsString() != want.system || a["messaging.destination.name"].AsString() != want.destination {
			t.Errorf("span %d: %v, want system %q, destination %q", i, a, want.system, want.destination)
		}
	}
}
