package ingestcore

import (
	"context"
	"time"

	"github.com/inboxd/inboxd/ingest"
	"github.com/inboxd/inboxd/internal/driver"
)

// flush writes b (retrying the same rows until it succeeds or ctx ends), then
// acknowledges it to its source and empties it. It returns an error only
// when ctx ended before the rows were written; then nothing is acknowledged
// and b is kept.
func (c *Pipeline) flush(ctx context.Context, b *batch) error {
	inserted, err := c.Write(ctx, b.rows)
	if err != nil {
		return err
	}
	c.Metrics.RowsInserted.Add(float64(inserted))
	c.Metrics.Duplicates.Add(float64(len(b.rows) - inserted))
	c.Metrics.BatchRows.Observe(float64(len(b.rows)))
	rejected := 0
	for _, row := range b.rows {
		if row.Reason != "" {
			rejected++
			c.Metrics.Rejected.WithLabelValues(string(row.Reason)).Inc()
			c.Log.Warn().Str("event_id", row.EventID).Str("event_type", row.EventType).
				Str("reason", string(row.Reason)).Str("last_error", row.LastError).
				Msg("message stored as rejected")
		}
	}
	c.Log.Debug().Int("rows", len(b.rows)).Int("inserted", inserted).
		Int("duplicates", len(b.rows)-inserted).Int("rejected", rejected).Msg("batch written")

	// The rows are committed in the database: now, and only now, the
	// acknowledgement (Kafka: the offsets). It is not cut short by ctx's
	// cancellation (the rows are safe, and acknowledging them spares a
	// redelivery) but keeps ctx's deadline, the shutdown budget, when it has
	// one.
	if b.ack != nil {
		timeout := c.Cfg.AckTimeout
		if dl, ok := ctx.Deadline(); ok {
			timeout = min(timeout, time.Until(dl))
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
		err = b.ack(cctx)
		cancel()
		if err != nil {
			c.Metrics.OffsetCommitErrors.Inc()
			msg := "acknowledging the batch failed after it was written; the messages may be delivered again and will be deduplicated"
			if c.kind == ingest.SourceKafka {
				msg = "committing offsets failed after the batch was written; the messages may be delivered again and will be deduplicated"
			}
			c.Log.Warn().Err(err).Int("rows", len(b.rows)).Msg(msg)
		}
	}
	c.Progressed()
	b.reset()
	return nil
}

// Write writes rows, retrying the same rows with capped exponential backoff
// until it succeeds or ctx ends. Ready is false from the first failure until
// a write succeeds.
func (c *Pipeline) Write(ctx context.Context, rows []Row) (int, error) {
	for attempt := 1; ; attempt++ {
		start := time.Now()
		inserted, err := c.writeOnce(ctx, rows)
		if err == nil {
			c.Metrics.BatchWriteDuration.Observe(time.Since(start).Seconds())
			if attempt > 1 {
				c.Log.Info().Int("rows", len(rows)).Int("attempts", attempt).Msg("batch written after retries; ingest resumed")
			}
			c.SetReady(true)
			return inserted, nil
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		c.Metrics.BatchWriteErrors.Inc()
		c.SetReady(false)
		delay := c.Backoff(attempt)
		c.Log.Error().Err(err).Int("rows", len(rows)).Int("attempt", attempt).Dur("retry_in", delay).
			Msg("writing batch failed; retrying the same batch, it stays unacknowledged")
		if !sleep(ctx, delay) {
			return 0, ctx.Err()
		}
	}
}

// maxIdentityRetries bounds the immediate retries of one write that clashes
// with ids taken outside the identity sequence; each retry moves the
// sequence past at least one taken id.
const maxIdentityRetries = 1000

// writeOnce makes one attempt at writing rows.
//
// A clash on the primary key means a third party inserted rows with
// explicit ids ahead of the identity sequence: the sequence values the
// failed statement drew are spent, so the same rows are retried at once,
// and succeed once the sequence has passed the taken ids. The data is not
// at fault and no row is rejected for it.
//
// If the database refuses the data itself (driver.AsDataError: a data
// exception such as an untranslatable character on a non-UTF-8 database, a
// program limit such as an index row too large, or data or index
// corruption), retrying cannot help: the rows are written one by one and a
// refused row is replaced, in rows, by a rejected placeholder that keeps
// what the message carried. Everything else, integrity violations included
// (an identity clash, a constraint someone added, a missing table), says
// nothing bad about the message: the batch is retried and ingest pauses
// meanwhile.
//
// Corruption (XX001, XX002) counts as refusal here as it does in the
// worker's poison search: one rule for both. Met on one row's path (its
// event id's page of the unique index), the placeholder, under another
// event id (the message's position), lands elsewhere and is stored; met
// wherever a row goes, the placeholder fails too and the error goes back to
// write, which retries the batch as for any other error. Nothing is lost
// either way: the placeholder keeps the message, and `inboxd requeue
// --status rejected` re-maps it once the damage is repaired. What
// corruption never does is stall ingest behind one row that cannot be
// stored.
func (c *Pipeline) writeOnce(ctx context.Context, rows []Row) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, c.Cfg.WriteTimeout)
	defer cancel()
	n, err := c.Writer.WriteBatch(ctx, rows)
	for i := 0; i < maxIdentityRetries && driver.IdentityClash(err); i++ {
		if i == 0 {
			c.Log.Warn().Err(err).Int("rows", len(rows)).
				Msg("inbox ids clash with rows inserted with explicit ids; retrying as the identity sequence moves past them " +
					"(fix it with: SELECT setval(pg_get_serial_sequence('inbox', 'id'), max(id)) FROM inbox)")
		}
		n, err = c.Writer.WriteBatch(ctx, rows)
	}
	if _, refused := driver.AsDataError(err); !refused {
		return n, err
	}
	c.Log.Warn().Err(err).Int("rows", len(rows)).Msg("database refused the batch; writing it row by row")
	total := 0
	for i := range rows {
		n, err := c.Writer.WriteBatch(ctx, rows[i:i+1])
		if pgErr, refused := driver.AsDataError(err); refused {
			c.Log.Error().Str("topic", rows[i].Source).Int32("partition", rows[i].Partition).
				Int64("offset", rows[i].Offset).Str("reject_id", rows[i].RejectedID()).Str("sqlstate", pgErr.Code).
				Msg("database refused a row; storing a rejected placeholder instead")
			placeholder := PlaceholderFor(rows[i], pgErr)
			if n, err = c.Writer.WriteBatch(ctx, []Row{placeholder}); driver.Classify(err) == driver.DataError {
				// Even the headers cannot be stored: keep key and payload.
				placeholder.Headers = []byte("{}")
				n, err = c.Writer.WriteBatch(ctx, []Row{placeholder})
			}
			if err == nil {
				rows[i] = placeholder
			}
		}
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}
