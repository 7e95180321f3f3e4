package otelenv_test

import (
	"compress/gzip"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/handlers/tracing"
	"github.com/inboxd/inboxd/internal/otelenv"
)

// otelEnv are the variables Setup and the SDK read; each test starts with
// all of them empty (unset, as far as Setup is concerned).
var otelEnv = []string{
	"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER",
	"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
	"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
	"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
	"OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
	"OTEL_EXPORTER_OTLP_COMPRESSION", "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION",
	"OTEL_EXPORTER_OTLP_INSECURE", "OTEL_EXPORTER_OTLP_TRACES_INSECURE",
	"OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES",
	"OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG",
}

// cleanEnv empties the OTEL_* variables, sets env, and restores the
// globals that Setup may change when the test ends.
func cleanEnv(t *testing.T, env map[string]string) {
	t.Helper()
	for _, k := range otelEnv {
		t.Setenv(k, "")
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	t.Cleanup(func() {
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(error) {}))
		otel.SetTracerProvider(noop.NewTracerProvider())
		otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator())
	})
}

// freePort returns a loopback port that nothing listens on.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestSetupOff(t *testing.T) {
	for name, env := range map[string]map[string]string{
		"no endpoint":           {},
		"blank endpoint":        {"OTEL_EXPORTER_OTLP_ENDPOINT": "  "},
		"only a protocol":       {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
		"sdk disabled":          {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"},
		"traces exporter none":  {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "none"},
		"unsupported protocol?": {"OTEL_EXPORTER_OTLP_PROTOCOL": "carrier-pigeon"}, // no endpoint: off, not checked
	} {
		t.Run(name, func(t *testing.T) {
			cleanEnv(t, env)
			before := otel.GetTracerProvider()
			tp, shutdown, err := otelenv.Setup(context.Background(), "inboxd")
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := tp.(noop.TracerProvider); !ok {
				t.Fatalf("provider %T, want noop.TracerProvider", tp)
			}
			if err := shutdown(context.Background()); err != nil {
				t.Fatalf("shutdown: %v", err)
			}
			if otel.GetTracerProvider() != before {
				t.Error("Setup changed the global provider with tracing off")
			}
		})
	}
}

func TestSetupConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
			`OTEL_EXPORTER_OTLP_PROTOCOL: "http/json" is not supported`},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "udp"},
			`OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: "udp" is not supported`},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "zipkin"},
			`OTEL_TRACES_EXPORTER: "zipkin" is not supported`},
	} {
		t.Run(tc.want, func(t *testing.T) {
			cleanEnv(t, tc.env)
			_, _, err := otelenv.Setup(context.Background(), "inboxd")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
		})
	}
}

// TestSetupShutdownNothingListening: an SDK provider for an endpoint where
// nothing listens; a span is waiting in the batch, and shutdown still
// returns within its context's deadline.
func TestSetupShutdownNothingListening(t *testing.T) {
	for _, proto := range []string{"", "http/protobuf", "grpc"} {
		t.Run("protocol="+proto, func(t *testing.T) {
			cleanEnv(t, map[string]string{
				"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + freePort(t),
				"OTEL_EXPORTER_OTLP_PROTOCOL": proto,
			})
			errs := make(chan error, 100)
			tp, shutdown, err := otelenv.Setup(context.Background(), "inboxd", otelenv.OnError(func(err error) {
				select {
				case errs <- err:
				default:
				}
			}))
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := tp.(*sdktrace.TracerProvider); !ok {
				t.Fatalf("provider %T, want *sdktrace.TracerProvider", tp)
			}
			if otel.GetTracerProvider() != tp {
				t.Error("Setup did not make its provider global")
			}
			if f := otel.GetTextMapPropagator().Fields(); !slices.Contains(f, "traceparent") || !slices.Contains(f, "baggage") {
				t.Errorf("global propagator's fields %v, want traceparent and baggage", f)
			}
			_, span := tp.Tracer("test").Start(context.Background(), "waiting in the batch")
			span.End()

			const bound = 2 * time.Second
			ctx, cancel := context.WithTimeout(context.Background(), bound)
			defer cancel()
			start := time.Now()
			err = shutdown(ctx)
			took := time.Since(start)
			t.Logf("shutdown took %s: %v", took.Round(time.Millisecond), err)
			if took > bound+time.Second {
				t.Errorf("shutdown took %s with a %s deadline", took, bound)
			}
			// The failed export is reported, either by shutdown or to the
			// error handler.
			if err == nil {
				select {
				case e := <-errs:
					t.Logf("error handler: %v", e)
				default:
					t.Error("the failed export was reported neither by shutdown nor to OnError's function")
				}
			}
		})
	}
}

// A W3C trace context as a producer would put it in the Kafka headers.
const (
	traceID     = "4bf92f3577b34da6a3ce929d0e0e4736"
	parentID    = "00f067aa0ba902b7"
	traceparent = "00-" + traceID + "-" + parentID + "-01"
)

// runTraced runs one event with a traceparent through the middleware on
// tp and shuts tp down, which exports the span.
func runTraced(t *testing.T, tp trace.TracerProvider, shutdown func(context.Context) error) {
	t.Helper()
	h := handlers.Chain(handlers.Ignore(), tracing.Middleware(tp, tracing.KafkaTopics("orders")))
	if err := h.Handle(context.Background(), &handlers.Event{ID: 42, Source: "orders", EventID: "evt-1", EventType: "order.created",
		Payload: []byte(`{"sku":"A-1"}`), Headers: map[string]string{"traceparent": traceparent}, Attempt: 3}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
}

// checkExport checks what a collector received from runTraced.
func checkExport(t *testing.T, reqs []*coltracepb.ExportTraceServiceRequest, service, version string) {
	t.Helper()
	var spans []*tracepb.Span
	res := map[string]string{}
	for _, r := range reqs {
		for _, rs := range r.GetResourceSpans() {
			for _, kv := range rs.GetResource().GetAttributes() {
				res[kv.GetKey()] = kv.GetValue().GetStringValue()
			}
			for _, ss := range rs.GetScopeSpans() {
				spans = append(spans, ss.GetSpans()...)
			}
		}
	}
	if len(spans) != 1 {
		t.Fatalf("collector got %d spans, want 1", len(spans))
	}
	s := spans[0]
	if s.GetName() != "inboxd order.created" || s.GetKind() != tracepb.Span_SPAN_KIND_CONSUMER {
		t.Errorf("span %q kind %v", s.GetName(), s.GetKind())
	}
	if got := trace.TraceID(s.GetTraceId()).String(); got != traceID {
		t.Errorf("trace id %s, want %s", got, traceID)
	}
	if got := trace.SpanID(s.GetParentSpanId()).String(); got != parentID {
		t.Errorf("parent span id %s, want %s", got, parentID)
	}
	var system string
	for _, kv := range s.GetAttributes() {
		if kv.GetKey() == "messaging.system" {
			system = kv.GetValue().GetStringValue()
		}
	}
	if system != "kafka" {
		t.Errorf("messaging.system %q, want kafka", system)
	}
	if res["service.name"] != service || res["service.version"] != version {
		t.Errorf("resource %v, want service.name %q and service.version %q", res, service, version)
	}
	if res["telemetry.sdk.language"] != "go" {
		t.Errorf("resource %v lacks the SDK's attributes", res)
	}
}

// otlpHTTP is a minimal OTLP/HTTP trace receiver.
func otlpHTTP(t *testing.T, path string) (url string, received func() []*coltracepb.ExportTraceServiceRequest) {
	t.Helper()
	reqs := make(chan *coltracepb.ExportTraceServiceRequest, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != path || r.Header.Get("Content-Type") != "application/x-protobuf" {
			t.Errorf("receiver got %s %s (%s), want POST %s (application/x-protobuf)", r.Method, r.URL.Path, r.Header.Get("Content-Type"), path)
			http.Error(w, "no", http.StatusNotFound)
			return
		}
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		b, err := io.ReadAll(body)
		req := &coltracepb.ExportTraceServiceRequest{}
		if err == nil {
			err = proto.Unmarshal(b, req)
		}
		if err != nil {
			t.Errorf("receiver: %v", err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		reqs <- req
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, func() []*coltracepb.ExportTraceServiceRequest {
		var got []*coltracepb.ExportTraceServiceRequest
		for {
			select {
			case r := <-reqs:
				got = append(got, r)
			default:
				return got
			}
		}
	}
}

func TestSetupExportsOverHTTP(t *testing.T) {
	t.Run("OTEL_EXPORTER_OTLP_ENDPOINT", func(t *testing.T) {
		url, received := otlpHTTP(t, "/v1/traces")
		cleanEnv(t, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": url})
		tp, shutdown, err := otelenv.Setup(context.Background(), "inboxd", otelenv.ServiceVersion("v1.2.3"))
		if err != nil {
			t.Fatal(err)
		}
		runTraced(t, tp, shutdown)
		checkExport(t, received(), "inboxd", "v1.2.3")
	})
	t.Run("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT and OTEL_SERVICE_NAME", func(t *testing.T) {
		url, received := otlpHTTP(t, "/custom/traces")
		cleanEnv(t, map[string]string{
			"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": url + "/custom/traces", // used as is
			"OTEL_EXPORTER_OTLP_PROTOCOL":        "grpc",                 // overridden by the next
			"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
			"OTEL_EXPORTER_OTLP_COMPRESSION":     "gzip",
			"OTEL_SERVICE_NAME":                  "inboxd-eu",
		})
		tp, shutdown, err := otelenv.Setup(context.Background(), "inboxd", otelenv.ServiceVersion("v1.2.3"))
		if err != nil {
			t.Fatal(err)
		}
		runTraced(t, tp, shutdown)
		checkExport(t, received(), "inboxd-eu", "v1.2.3")
	})
}

// grpcReceiver is a minimal OTLP/gRPC trace receiver.
type grpcReceiver struct {
	coltracepb.UnimplementedTraceServiceServer
	reqs chan *coltracepb.ExportTraceServiceRequest
}

func (g *grpcReceiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	g.reqs <- req
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func TestSetupExportsOverGRPC(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rcv := &grpcReceiver{reqs: make(chan *coltracepb.ExportTraceServiceRequest, 16)}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, rcv)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)

	cleanEnv(t, map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + ln.Addr().String(), // http: plaintext
		"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
	})
	tp, shutdown, err := otelenv.Setup(context.Background(), "inboxd", otelenv.ServiceVersion("v2.0.0"))
	if err != nil {
		t.Fatal(err)
	}
	runTraced(t, tp, shutdown)
	var got []*coltracepb.ExportTraceServiceRequest
	for len(rcv.reqs) > 0 {
		got = append(got, <-rcv.reqs)
	}
	checkExport(t, got, "inboxd", "v2.0.0")
}
