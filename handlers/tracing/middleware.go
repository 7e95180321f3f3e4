// Package tracing traces inboxd's handlers with OpenTelemetry.
//
// Middleware wraps every handler of a handlers.Registry (Registry.Use) so
// that each attempt at a row is a span of kind consumer, named
// "inboxd <event type>", whose parent is the W3C trace context (traceparent,
// tracestate) that the producer put in the Kafka message's headers; an event
// without one starts a new trace. The span carries the messaging semantic
// conventions that fit an inbox row (messaging.system, .operation.*,
// .destination.name, .message.id, .message.body.size) and inboxd's own
// attributes (event type and source, attempt, row id); a failed attempt sets
// the span's status to Error and records the error, and a permanent one is
// marked with inboxd.error.permanent. The handler's context carries the span:
// handler code starts child spans from it, and the built-in http handler
// sends it on in a traceparent header when a global propagator is set.
//
// The package reads no environment: the program passes its tracer provider
// to Middleware (the inboxd daemon builds its own from the standard OTEL_*
// variables; with a no-op provider Middleware adds nothing at all to a
// handler).
package tracing

import (
	"context"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/inboxd/inboxd/handlers"
)

// ScopeName is the instrumentation scope of the spans Middleware starts.
const ScopeName = "github.com/inboxd/inboxd/handlers/tracing"

// inboxd's own span attributes, besides the messaging semantic conventions.
const (
	// AttrEventType is the event's type (Event.EventType).
	AttrEventType = attribute.Key("inboxd.event.type")
	// AttrEventSource is the event's source (Event.Source: the Kafka topic
	// for ingested rows).
	AttrEventSource = attribute.Key("inboxd.event.source")
	// AttrAttempt is the attempt's number, from 1 (Event.Attempt).
	AttrAttempt = attribute.Key("inboxd.attempt")
	// AttrRowID is the row's primary key in the inbox table (Event.ID).
	AttrRowID = attribute.Key("inboxd.row.id")
	// AttrPermanent is set on a failed attempt: true when the error was
	// made with handlers.Permanent (the row goes dead at once), false when
	// the row will be retried (unless its attempts are used up).
	AttrPermanent = attribute.Key("inboxd.error.permanent")
	// AttrRetryAfter is the delay in seconds that a failed attempt asked
	// for with handlers.RetryAfter.
	AttrRetryAfter = attribute.Key("inboxd.retry_after")
)

// The values of messaging.system.
const (
	// SystemKafka is messaging.system for rows whose source is one of the
	// topics given with KafkaTopics.
	SystemKafka = "kafka"
	// SystemRabbitMQ is messaging.system for rows whose source is one of
	// the queues given with RabbitMQQueues.
	SystemRabbitMQ = "rabbitmq"
	// SystemNATS is messaging.system for rows whose source is one of the
	// streams given with NATSStreams.
	SystemNATS = "nats"
	// SystemInbox is messaging.system for every other row: written into the
	// inbox table by some other means.
	SystemInbox = "inbox"
)

// Option configures Middleware.
type Option func(*config)

type config struct {
	propagator propagation.TextMapPropagator
	systems    map[string]string // messaging.system by source
}

// KafkaTopics names the sources that are Kafka topics (INBOXD_KAFKA_TOPICS):
// their spans say messaging.system=kafka and messaging.destination.name=the
// topic. Rows of sources no option names say messaging.system=inbox. An
// inbox row does not record which broker it came from, hence these options.
func KafkaTopics(topics ...string) Option { return sources(SystemKafka, topics) }

// RabbitMQQueues names the sources that are RabbitMQ queues
// (INBOXD_AMQP_QUEUES): messaging.system=rabbitmq, with the queue as
// messaging.destination.name.
func RabbitMQQueues(queues ...string) Option { return sources(SystemRabbitMQ, queues) }

// NATSStreams names the sources that are NATS JetStream streams
// (INBOXD_NATS_STREAMS): messaging.system=nats, with the stream as
// messaging.destination.name.
func NATSStreams(streams ...string) Option { return sources(SystemNATS, streams) }

// sources records system as the messaging.system of names.
func sources(system string, names []string) Option {
	return func(c *config) {
		if c.systems == nil {
			c.systems = make(map[string]string, len(names))
		}
		for _, n := range names {
			c.systems[n] = system
		}
	}
}

// Propagator sets how the parent is read from the event's headers. The
// default is W3C Trace Context alone (traceparent, tracestate), whatever the
// global propagator is.
func Propagator(p propagation.TextMapPropagator) Option {
	return func(c *config) {
		if p != nil {
			c.propagator = p
		}
	}
}

// Middleware returns handler middleware that runs every attempt in a span
// started with tp (the global provider, otel.GetTracerProvider, when tp is
// nil); see the package documentation for the span. The span ends when the
// handler returns, or panics (the panic is recorded and goes on).
//
// With a no-op provider (noop.TracerProvider, what the daemon uses when
// tracing is off) the middleware returns each handler unchanged: no span, no
// header parsing, no cost.
//
// Add it with Registry.Use. Middleware added before it runs outside the
// span; middleware added after it, and the handler, see the span in their
// context. The engine's own recovery, metrics and logging run outside every
// registry middleware, so a panic passes through the span on its way to the
// recovery.
func Middleware(tp trace.TracerProvider, opts ...Option) handlers.Middleware {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	if _, off := tp.(noop.TracerProvider); off {
		return func(next handlers.Handler) handlers.Handler { return next }
	}
	cfg := config{propagator: propagation.TraceContext{}}
	for _, o := range opts {
		o(&cfg)
	}
	t := &tracer{
		tracer:     tp.Tracer(ScopeName, trace.WithSchemaURL(semconv.SchemaURL)),
		propagator: cfg.propagator,
		systems:    cfg.systems,
	}
	return func(next handlers.Handler) handlers.Handler {
		return &traced{t: t, next: next}
	}
}

// tracer is what the handlers wrapped by one Middleware share.
type tracer struct {
	tracer     trace.Tracer
	propagator propagation.TextMapPropagator
	systems    map[string]string // messaging.system by source
}

// traced is a handler wrapped by Middleware.
type traced struct {
	t    *tracer
	next handlers.Handler
}

// Handle runs the wrapped handler in a span.
func (h *traced) Handle(ctx context.Context, ev *handlers.Event) (err error) {
	t := h.t
	parent := t.propagator.Extract(ctx, headerCarrier(ev.Headers))
	opts := []trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(t.attributes(ev)...),
	}
	// The messaging conventions ask for a link to the message's creation
	// context besides (or instead of) making it the parent.
	if sc := trace.SpanContextFromContext(parent); sc.IsValid() && sc.IsRemote() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
	}
	ctx, span := t.tracer.Start(parent, spanName(ev), opts...)

	panicked := true
	defer func() {
		if panicked {
			r := recover()
			if r == nil { // runtime.Goexit: let it go on
				span.SetStatus(codes.Error, "handler exited its goroutine (runtime.Goexit)")
				span.End()
				return
			}
			span.RecordError(fmt.Errorf("panic: %v", r), trace.WithStackTrace(true))
			span.SetStatus(codes.Error, "handler panicked")
			span.End()
			panic(r) // the frames that panicked are still on the stack
		}
		if err != nil {
			permanent := handlers.IsPermanent(err)
			attrs := []attribute.KeyValue{AttrPermanent.Bool(permanent), semconv.ErrorTypeKey.String(errorType(permanent))}
			if d, ok := handlers.RetryDelay(err); ok {
				attrs = append(attrs, AttrRetryAfter.Float64(d.Seconds()))
			}
			span.SetAttributes(attrs...)
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}()
	err = h.next.Handle(ctx, ev)
	panicked = false
	return err
}

// errorType is error.type for a failed attempt: the class of the failure as
// the inbox sees it.
func errorType(permanent bool) string {
	if permanent {
		return "permanent"
	}
	return "retryable"
}

// spanName is "inboxd <event type>".
func spanName(ev *handlers.Event) string {
	if ev.EventType == "" {
		return "inboxd process"
	}
	return "inboxd " + ev.EventType
}

// attributes are the span's attributes at its start.
func (t *tracer) attributes(ev *handlers.Event) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, 11)
	if system, ok := t.systems[ev.Source]; ok {
		attrs = append(attrs,
			semconv.MessagingSystemKey.String(system),
			semconv.MessagingDestinationName(ev.Source))
	} else {
		attrs = append(attrs, semconv.MessagingSystemKey.String(SystemInbox))
	}
	attrs = append(attrs,
		semconv.MessagingOperationTypeProcess,
		semconv.MessagingOperationName("process"),
		semconv.MessagingMessageID(ev.EventID),
		semconv.MessagingMessageBodySize(len(ev.Payload)),
		AttrEventType.String(ev.EventType),
		AttrEventSource.String(ev.Source),
		AttrAttempt.Int(ev.Attempt),
		AttrRowID.Int64(ev.ID),
	)
	return attrs
}

// headerCarrier reads an event's headers for a propagator. Kafka header
// names are case-sensitive, but producers spell traceparent differently:
// an exact match wins, else the smallest name equal regardless of case.
type headerCarrier map[string]string

// Get returns the value of the header key.
func (c headerCarrier) Get(key string) string {
	if v, ok := c[key]; ok {
		return v
	}
	best, found := "", false
	for k := range c {
		if strings.EqualFold(k, key) && (!found || k < best) {
			best, found = k, true
		}
	}
	if !found {
		return ""
	}
	return c[best]
}

// Set does nothing: an event's headers are read only.
func (c headerCarrier) Set(string, string) {}

// Keys returns the header names.
func (c headerCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
