package engine

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/internal/backoff"
	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/startstop"
)

// listener holds a dedicated connection that LISTENs for the inbox
// trigger's notifications and wakes the claim loop. When the connection
// fails it reconnects with backoff; polling covers the gap. It is a
// service (internal/startstop): it listens from Start until Stop or the
// end of Start's context.
type listener struct {
	startstop.Base
	db      *pgxpool.Pool // its connections' configuration
	wake    func()        // rows may be due: the claim loop looks
	ready   chan struct{} // closed once it listens (or gave up and polls)
	metrics *metrics
	log     zerolog.Logger
}

// newListener returns a listener on db's configuration that calls wake.
func newListener(db *pgxpool.Pool, wake func(), log zerolog.Logger, m *metrics) *listener {
	return &listener{db: db, wake: wake, ready: make(chan struct{}), metrics: m, log: log}
}

// Start launches the listening.
func (l *listener) Start(ctx context.Context) error {
	return l.StartWith(ctx, func(ctx context.Context) error {
		l.Go(func() { l.listen(ctx) })
		return nil
	})
}

// listen listens until ctx ends.
func (l *listener) listen(ctx context.Context) {
	readyOnce := false
	markReady := func() {
		if !readyOnce {
			readyOnce = true
			close(l.ready)
		}
	}
	defer markReady()

	retry := backoff.NewRetrier(backoff.Exponential{Base: 100 * time.Millisecond, Max: 30 * time.Second})
	for ctx.Err() == nil {
		err := l.listenOnce(ctx, func() { markReady(); retry.Succeeded() })
		if ctx.Err() != nil {
			return
		}
		l.metrics.dbErrors.WithLabelValues("listen").Inc()
		delay := retry.Failed()
		l.log.Warn().Err(err).Dur("retry_in", delay).Msg("notification listener lost; polling meanwhile")
		markReady()
		if !backoff.Sleep(ctx, delay) {
			return
		}
	}
}

func (l *listener) listenOnce(ctx context.Context, ready func()) error {
	conn, err := pgx.ConnectConfig(ctx, l.db.Config().ConnConfig.Copy())
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, driver.ListenSQL); err != nil {
		return err
	}
	ready()
	// Rows may have arrived while we were not listening.
	l.wake()
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
		l.wake()
	}
}
