package inboxd

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/migrations"
)

// checkSchema refuses to run on a schema older than this binary's (unless
// asked to migrate first) or on a newer one that is not compatible with it;
// on a newer, compatible one (after a rollback) it warns and goes on. Unless
// asked to migrate, it only reads.
func checkSchema(ctx context.Context, db *pgxpool.Pool, migrateFirst bool, log zerolog.Logger) error {
	conn, err := db.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("database: %w", err)
	}
	defer conn.Release()
	if migrateFirst {
		res, err := migrations.Migrate(ctx, conn.Conn())
		if err != nil {
			return err
		}
		if res.Ahead {
			log.Warn().Int32("schema", res.From).Msg("schema is newer than this inboxd and compatible with it: nothing migrated")
			return nil
		}
		log.Info().Int32("from", res.From).Int32("to", res.To).Msg("schema migrated")
		return nil
	}
	st, err := migrations.Inspect(ctx, conn)
	if err != nil {
		return err
	}
	if err := st.Err(); err != nil {
		return err
	}
	if st.Ahead() {
		log.Warn().Int32("schema", st.Current).Int32("binary_schema", st.Latest).Int32("oldest_compatible", st.OldestCompatible).
			Msg("schema is newer than this inboxd and compatible with it (a rollback?): running")
	}
	warnIfNotVacuumed(ctx, conn.Conn(), log)
	return nil
}

// warnIfNotVacuumed logs a warning when autovacuum will not vacuum the
// inbox (off for the server, or for the table): every event leaves dead
// row versions behind, and without vacuum the table and its indexes grow
// and claims slow down until someone runs VACUUM. A failed check is only
// logged at debug: it must not stop the daemon.
func warnIfNotVacuumed(ctx context.Context, conn *pgx.Conn, log zerolog.Logger) {
	server, table, err := driver.Autovacuum(ctx, conn)
	switch {
	case err != nil:
		log.Debug().Err(err).Msg("could not read the autovacuum settings")
	case !server || !table:
		log.Warn().Bool("autovacuum", server).Bool("inbox_autovacuum_enabled", table).
			Msg("autovacuum will not vacuum the inbox: its dead rows pile up and claims slow down over time; " +
				"turn autovacuum on, or run VACUUM inbox every minute or so (docs/operations.md, Vacuum)")
	}
}
