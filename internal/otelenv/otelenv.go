// Package otelenv sets up OpenTelemetry's tracing for the daemon from the
// standard OTEL_* environment variables (Setup): the daemon's wiring, kept
// out of handlers/tracing so that an embedder's program, which brings its
// own tracer provider to tracing.Middleware, links no OTLP exporter and
// reads no environment.
package otelenv

import (
	"context"
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// The values of OTEL_EXPORTER_OTLP_PROTOCOL and
// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL that Setup accepts.
const (
	// ProtocolGRPC exports with OTLP over gRPC (port 4317 by convention).
	ProtocolGRPC = "grpc"
	// ProtocolHTTPProtobuf exports with OTLP over HTTP, protobuf-encoded
	// (port 4318 by convention). It is the default, as the OpenTelemetry
	// specification recommends.
	ProtocolHTTPProtobuf = "http/protobuf"
)

// SetupOption configures Setup.
type SetupOption func(*setupConfig)

type setupConfig struct {
	version string
	onError func(error)
}

// ServiceVersion sets the resource's service.version. Without it, Setup
// uses the main module's version from the build information, or "dev".
func ServiceVersion(v string) SetupOption {
	return func(c *setupConfig) { c.version = v }
}

// OnError sends OpenTelemetry's own errors (a failed export, say) to f
// instead of the standard logger, when tracing is on: Setup makes it otel's
// global error handler. f must be safe for concurrent use; it is called for
// every failed export, so it should not be loud.
func OnError(f func(error)) SetupOption {
	return func(c *setupConfig) { c.onError = f }
}

// Setup returns the tracer provider that the standard OpenTelemetry
// environment variables ask for, and the function that flushes and stops it.
//
// Tracing is on when OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set, unless OTEL_SDK_DISABLED=true
// or OTEL_TRACES_EXPORTER=none. Then tp is an SDK provider that exports in
// batches with OTLP over the protocol named by
// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else OTEL_EXPORTER_OTLP_PROTOCOL:
// "http/protobuf" (the default) or "grpc". The exporter, the batcher and the
// sampler read their own variables (OTEL_EXPORTER_OTLP_HEADERS, _TIMEOUT,
// _INSECURE, _CERTIFICATE, _COMPRESSION, OTEL_BSP_*, OTEL_TRACES_SAMPLER,
// …). The resource has service.name = serviceName and service.version,
// which OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override, and the
// host and SDK attributes. Setup also makes tp the global tracer provider
// and W3C Trace Context with Baggage the global propagator, so that code
// using otel.Tracer and the http handler's traceparent header follow it,
// and OnError's function, if given, otel's error handler.
//
// Otherwise tp is a no-op provider, shutdown does nothing, and the globals
// are left alone. With it tracing.Middleware adds nothing to a handler.
//
// Call shutdown once, at exit, with a context that bounds it: it exports
// the spans still buffered, and gives up when ctx ends. Setup itself does
// not connect to the collector. An unsupported protocol or exporter is an
// error naming its variable.
//
// Setup reads the process environment (os.Getenv), as the exporters do.
func Setup(ctx context.Context, serviceName string, opts ...SetupOption) (tp trace.TracerProvider, shutdown func(context.Context) error, err error) {
	cfg := setupConfig{version: buildVersion()}
	for _, o := range opts {
		o(&cfg)
	}
	off := func() (trace.TracerProvider, func(context.Context) error, error) {
		return noop.NewTracerProvider(), func(context.Context) error { return nil }, nil
	}

	if disabled, _ := strconv.ParseBool(strings.TrimSpace(os.Getenv("OTEL_SDK_DISABLED"))); disabled {
		return off()
	}
	switch exp := strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER")); exp {
	case "", "otlp":
	case "none":
		return off()
	default:
		return nil, nil, fmt.Errorf("OTEL_TRACES_EXPORTER: %q is not supported (otlp or none)", exp)
	}
	if strings.TrimSpace(os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT")) == "" &&
		strings.TrimSpace(os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")) == "" {
		return off()
	}

	if cfg.onError != nil {
		otel.SetErrorHandler(otel.ErrorHandlerFunc(cfg.onError))
	}
	name, proto := "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", strings.TrimSpace(os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"))
	if proto == "" {
		name, proto = "OTEL_EXPORTER_OTLP_PROTOCOL", strings.TrimSpace(os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL"))
	}
	var exporter sdktrace.SpanExporter
	switch proto {
	case "", ProtocolHTTPProtobuf:
		exporter, err = otlptracehttp.New(ctx)
	case ProtocolGRPC:
		exporter, err = otlptracegrpc.New(ctx)
	default:
		return nil, nil, fmt.Errorf("%s: %q is not supported (%s or %s)", name, proto, ProtocolHTTPProtobuf, ProtocolGRPC)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}

	sdk := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exporter),
		sdktrace.WithResource(newResource(ctx, serviceName, cfg.version)))
	otel.SetTracerProvider(sdk)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	return sdk, sdk.Shutdown, nil
}

// newResource describes the service: service.name and service.version as
// given, unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES say otherwise,
// with the host's name and the SDK's attributes. A detector that fails (a
// malformed OTEL_RESOURCE_ATTRIBUTES, say) leaves out its part only: the
// error goes to otel's error handler, tracing still starts.
func newResource(ctx context.Context, serviceName, version string) *resource.Resource {
	res, err := resource.New(ctx,
		resource.WithTelemetrySDK(),
		resource.WithHost(),
		resource.WithAttributes(semconv.ServiceName(serviceName), semconv.ServiceVersion(version)),
		resource.WithFromEnv(), // last: the environment wins
	)
	if err != nil {
		otel.Handle(fmt.Errorf("tracing: resource: %w", err))
	}
	return res
}

// buildVersion is the main module's version, or "dev" for a build outside
// a module version (go build in the work tree).
func buildVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" && info.Main.Version != "(devel)" {
		return info.Main.Version
	}
	return "dev"
}
