package engine

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/internal/backoff"
	"github.com/inboxd/inboxd/internal/driver"
)

// listen holds a dedicated connection that LISTENs for the inbox trigger's
// notifications and wakes the claim loop. When the connection fails it
// reconnects with backoff; polling covers the gap.
func (p *Pool) listen(ctx context.Context) {
	readyOnce := false
	markReady := func() {
		if !readyOnce {
			readyOnce = true
			close(p.ready)
		}
	}
	defer markReady()

	retry := backoff.NewRetrier(backoff.Exponential{Base: 100 * time.Millisecond, Max: 30 * time.Second})
	for ctx.Err() == nil {
		err := p.listenOnce(ctx, func() { markReady(); retry.Succeeded() })
		if ctx.Err() != nil {
			return
		}
		p.metrics.dbErrors.WithLabelValues("listen").Inc()
		delay := retry.Failed()
		p.log.Warn().Err(err).Dur("retry_in", delay).Msg("notification listener lost; polling meanwhile")
		markReady()
		if !backoff.Sleep(ctx, delay) {
			return
		}
	}
}

func (p *Pool) listenOnce(ctx context.Context, ready func()) error {
	conn, err := pgx.ConnectConfig(ctx, p.db.Config().ConnConfig.Copy())
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, driver.ListenSQL); err != nil {
		return err
	}
	ready()
	// Rows may have arrived while we were not listening.
	signal(p.wake)
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
		signal(p.wake)
	}
}
