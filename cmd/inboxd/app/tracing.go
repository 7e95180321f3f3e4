package app

import (
	"context"
	"time"

	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/config"
	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/handlers/tracing"
	"github.com/inboxd/inboxd/internal/otelenv"
)

// startTracing sets up OpenTelemetry from the standard OTEL_* variables
// (off, and free, without an OTLP endpoint) and returns the middleware that
// makes a span of every attempt, and a function that flushes the spans
// still buffered at exit, within a second (the shutdown bound holds).
func startTracing(ctx context.Context, cfg config.Config, log zerolog.Logger) (handlers.Middleware, func(), error) {
	tlog := log.With().Str("component", "tracing").Logger()
	tp, shutdown, err := otelenv.Setup(ctx, "inboxd",
		otelenv.ServiceVersion(versionString()),
		otelenv.OnError(func(err error) { tlog.Warn().Err(err).Msg("opentelemetry") }))
	if err != nil {
		return nil, nil, err
	}
	var opts []tracing.Option
	if cfg.IngestEnabled() {
		opts = append(opts, tracing.KafkaTopics(cfg.KafkaTopics...))
	}
	opts = append(opts, tracing.RabbitMQQueues(cfg.AMQPQueues...), tracing.NATSStreams(cfg.NATSStreams...))
	stop := func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 500*time.Millisecond)
		defer cancel()
		if err := shutdown(sctx); err != nil {
			tlog.Warn().Err(err).Msg("spans not flushed at exit")
		}
	}
	return tracing.Middleware(tp, opts...), stop, nil
}
