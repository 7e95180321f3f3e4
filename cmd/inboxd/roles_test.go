package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/testkit"
)

// rolesScript is the least-privilege roles script under test.
const rolesScript = "../../deploy/sql/roles.sql"

// The roles of deploy/sql/roles.sql are enough, and no more than enough:
// migrate runs as the migrator; run, stats, dead, show, requeue (dead and
// rejected rows), discard and prune run as the runtime role, which holds
// exactly SELECT, INSERT, UPDATE, DELETE on inbox, USAGE on its identity
// sequence and SELECT on the two schema-version tables, and cannot create a
// table.
func TestLeastPrivilegeRoles(t *testing.T) {
	t.Parallel()
	psql, err := exec.LookPath("psql")
	if err != nil {
		testkit.Unavailable(t, "psql is not on PATH (Debian's postgresql-client): deploy/sql/roles.sql not tested")
	}
	ctx := context.Background()
	suffix := randomSuffix(t)
	migrator, runtime := "inboxd_t_mig_"+suffix, "inboxd_t_rt_"+suffix
	// Registered before the database: the database is dropped first, and
	// with it the roles' privileges and default privileges.
	t.Cleanup(func() {
		admin, err := pgx.Connect(context.Background(), pgtest.AdminURL())
		if err != nil {
			t.Errorf("drop roles: %v", err)
			return
		}
		defer admin.Close(context.Background())
		for _, r := range []string{runtime, migrator} {
			if _, err := admin.Exec(context.Background(), "DROP ROLE IF EXISTS "+pgx.Identifier{r}.Sanitize()); err != nil {
				t.Errorf("drop role %s: %v", r, err)
			}
		}
	})
	db := pgtest.NewEmpty(t, false)
	adminURL, migratorURL, runtimeURL := db.URL, withUser(t, db.URL, migrator), withUser(t, db.URL, runtime)

	runScript := func() {
		t.Helper()
		cmd := exec.Command(psql, "-X", "-q", "-d", adminURL, "-f", rolesScript, "-v", "migrator="+migrator, "-v", "runtime="+runtime)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("psql -f %s: %v\n%s", rolesScript, err, out)
		}
	}
	runScript()
	code, out := inboxd(t, []string{"INBOXD_DATABASE_URL=" + runtimeURL, "INBOXD_MIGRATE_DATABASE_URL=" + migratorURL}, "migrate")
	if code != 0 || !strings.Contains(out, "schema migrated from version 0 to") {
		t.Fatalf("migrate as the migrator: exit %d\n%s", code, out)
	}
	runScript() // again after migrate, as documented: idempotent, and narrows the version tables

	var owner string
	if err := db.Pool.QueryRow(ctx, `SELECT tableowner FROM pg_tables WHERE tablename = 'inbox'`).Scan(&owner); err != nil || owner != migrator {
		t.Fatalf("inbox owned by %q (%v), want the migrator %s", owner, err, migrator)
	}
	// The script created pg_trgm (neither role may), so the migrator built
	// the error text's index (migration 21).
	var indexOwner string
	if err := db.Pool.QueryRow(ctx, `SELECT pg_get_userbyid(relowner) FROM pg_class WHERE oid = to_regclass('public.inbox_error_trgm_idx')`).
		Scan(&indexOwner); err != nil || indexOwner != migrator {
		t.Errorf("inbox_error_trgm_idx owned by %q (%v), want the migrator %s", indexOwner, err, migrator)
	}

	// Exactly these privileges on the schema's tables and sequences.
	rows, err := db.Pool.Query(ctx, `
		SELECT c.relname || ':' || p.privilege_type
		FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'public'
		CROSS JOIN unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'REFERENCES', 'TRIGGER', 'USAGE']) AS p(privilege_type)
		WHERE c.relkind IN ('r', 'p', 'S', 'v', 'm')
		  AND CASE WHEN c.relkind = 'S'
		           THEN p.privilege_type IN ('SELECT', 'UPDATE', 'USAGE') AND has_sequence_privilege($1, c.oid, p.privilege_type)
		           ELSE p.privilege_type <> 'USAGE' AND has_table_privilege($1, c.oid, p.privilege_type) END
		ORDER BY 1`, runtime)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"console_sessions:DELETE", "console_sessions:INSERT", "console_sessions:SELECT", "console_sessions:UPDATE",
		"inbox:DELETE", "inbox:INSERT", "inbox:SELECT", "inbox:UPDATE",
		"inbox_attempts:DELETE", "inbox_attempts:INSERT", "inbox_attempts:SELECT", "inbox_attempts:UPDATE", "inbox_id_seq:USAGE",
		"inbox_starts:DELETE", "inbox_starts:INSERT", "inbox_starts:SELECT", "inbox_starts:UPDATE",
		"inboxd_partitioned:SELECT", "inboxd_schema_compat:SELECT", "inboxd_schema_version:SELECT",
		"ops_audit:INSERT", "ops_audit:SELECT", "ops_audit_id_seq:USAGE",
		"outbox:DELETE", "outbox:INSERT", "outbox:SELECT", "outbox:UPDATE", "outbox_id_seq:USAGE",
		"outbox_relays:DELETE", "outbox_relays:INSERT", "outbox_relays:SELECT", "outbox_relays:UPDATE",
		"outbox_shards:DELETE", "outbox_shards:INSERT", "outbox_shards:SELECT", "outbox_shards:UPDATE",
		"route_controls:DELETE", "route_controls:INSERT", "route_controls:SELECT", "route_controls:UPDATE",
		"route_rollup:DELETE", "route_rollup:INSERT", "route_rollup:SELECT", "route_rollup:UPDATE",
		"route_tokens:DELETE", "route_tokens:INSERT", "route_tokens:SELECT", "route_tokens:UPDATE",
		"webhook_replays:DELETE", "webhook_replays:INSERT", "webhook_replays:SELECT", "webhook_replays:UPDATE"}
	if !slices.Equal(got, want) {
		t.Errorf("runtime role's privileges:\n%q\nwant:\n%q", got, want)
	}
	var canCreate bool
	if err := db.Pool.QueryRow(ctx, `SELECT has_schema_privilege($1, 'public', 'CREATE')`, runtime).Scan(&canCreate); err != nil || canCreate {
		t.Errorf("runtime role has CREATE on the schema (%v)", err)
	}

	// The runtime role cannot create a table, nor write the schema version.
	rt, err := pgx.Connect(ctx, runtimeURL)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(ctx)
	for _, sql := range []string{
		"CREATE TABLE inboxd_intruder (a int)",
		"UPDATE inboxd_schema_version SET version = version",
		"TRUNCATE inbox",
		"ALTER TABLE inbox ADD COLUMN intruder int",
		// The audit trail is append-only.
		"UPDATE ops_audit SET operator = 'mallory'",
		"DELETE FROM ops_audit",
		"TRUNCATE ops_audit",
	} {
		_, err := rt.Exec(ctx, sql)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || (pgErr.Code != "42501" && pgErr.Code != "42P01") {
			t.Errorf("runtime role: %s: %v, want permission denied", sql, err)
		}
	}

	// It appends to the audit trail.
	if _, err := rt.Exec(ctx, "INSERT INTO ops_audit (operator, action) VALUES ('alice', 'sign_in')"); err != nil {
		t.Errorf("runtime role: append to the audit trail: %v", err)
	}

	// The daemon as the runtime role: workers only, a type routed to
	// ignore, one to dead; retention far away so prune below has work.
	routes := writeRoutes(t, "routes:\n  - type: order.created\n    handler: ignore\n  - type: order.poison\n    handler: dead\ndefault: dead\n")
	env := []string{"INBOXD_DATABASE_URL=" + runtimeURL, "INBOXD_ROUTES=" + routes, "INBOXD_RETENTION_INTERVAL=1h"}
	d := startDaemon(t, env...)

	// A row inserted with SQL, by the runtime role, is processed.
	if _, err := rt.Exec(ctx, `INSERT INTO inbox (source, event_id, event_type, payload) VALUES
		('shop', 'ok-1', 'order.created', '{"n":1}'), ('shop', 'poison-1', 'order.poison', '{"n":2}')`); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "ok-1 processed", func() bool { s, _ := rowStatus(t, db, "ok-1"); return s == "processed" })
	waitFor(t, 20*time.Second, "poison-1 dead", func() bool { s, _ := rowStatus(t, db, "poison-1"); return s == "dead" })
	poisonID := rowID(t, db, "poison-1")

	// Every operator command as the runtime role.
	code, out = inboxd(t, env, "stats", "--json")
	var stats struct {
		Rows             map[string]int64 `json:"rows"`
		SchemaCompatible bool             `json:"schema_compatible"`
	}
	if err := json.Unmarshal([]byte(out), &stats); code != 0 || err != nil || stats.Rows["dead"] != 1 || !stats.SchemaCompatible {
		t.Fatalf("stats: exit %d %v\n%s", code, err, out)
	}
	if code, out := inboxd(t, env, "dead"); code != 0 || !strings.Contains(out, "poison-1") {
		t.Fatalf("dead: exit %d\n%s", code, out)
	}
	if code, out := inboxd(t, env, "show", fmt.Sprint(poisonID)); code != 0 || !strings.Contains(out, `{"n":2}`) {
		t.Fatalf("show: exit %d\n%s", code, out)
	}
	if code, out := inboxd(t, env, "requeue", "--id", fmt.Sprint(poisonID)); code != 0 || !strings.Contains(out, "requeued 1 dead row") {
		t.Fatalf("requeue: exit %d\n%s", code, out)
	}
	// Routed to dead again by the daemon, woken by requeue's notification.
	waitFor(t, 20*time.Second, "poison-1 dead again", func() bool {
		s, attempts := rowStatus(t, db, "poison-1")
		return s == "dead" && attempts == 1
	})
	if code, out := inboxd(t, env, "discard", "--id", fmt.Sprint(poisonID)); code != 0 || !strings.Contains(out, "discarded 1 dead row") {
		t.Fatalf("discard: exit %d\n%s", code, out)
	}

	// A rejected row (no type header), requeued once the mapping knows
	// where the type is: it is processed.
	if _, err := rt.Exec(ctx, `INSERT INTO inbox (source, event_id, event_type, status, headers, payload, last_error,
		kafka_topic, kafka_partition, kafka_offset)
		VALUES ('shop', 'shop/0/7', '', 'rejected', '{"event_id":"ok-2","kind":"order.created"}', '{}',
		        'missing event type (headers event_type, ce_type)', 'shop', 0, 7)`); err != nil {
		t.Fatal(err)
	}
	if code, out := inboxd(t, append(env, "INBOXD_EVENT_TYPE_HEADERS=event_type,kind"), "requeue", "--status", "rejected", "--all"); code != 0 ||
		!strings.Contains(out, "requeued as event id ok-2, type order.created") {
		t.Fatalf("requeue --status rejected: exit %d\n%s", code, out)
	}
	waitFor(t, 20*time.Second, "ok-2 processed", func() bool { s, _ := rowStatus(t, db, "ok-2"); return s == "processed" })

	// prune deletes an expired processed row and an expired dead row.
	if _, err := db.Pool.Exec(ctx, `INSERT INTO inbox (source, event_id, event_type, status, processed_at, updated_at, last_error) VALUES
		('shop', 'expired-1', 't', 'processed', now() - interval '30 days', now() - interval '30 days', NULL),
		('shop', 'expired-2', 't', 'dead', NULL, now() - interval '60 days', 'x')`); err != nil {
		t.Fatal(err)
	}
	pruneEnv := append(env, "INBOXD_DEAD_RETENTION=720h")
	if code, out := inboxd(t, pruneEnv, "prune", "--dry-run"); code != 0 || !strings.Contains(out, "would prune 1 processed row") {
		t.Fatalf("prune --dry-run: exit %d\n%s", code, out)
	}
	if code, out := inboxd(t, pruneEnv, "prune"); code != 0 || !strings.Contains(out, "pruned 1 processed row") || !strings.Contains(out, "and 1 dead/rejected row") {
		t.Fatalf("prune: exit %d\n%s", code, out)
	}

	if code := terminate(t, d, 30*time.Second); code != 0 {
		t.Fatalf("daemon exit code %d after SIGTERM", code)
	}
	if strings.Contains(d.Logs(), "permission denied") {
		t.Fatalf("the daemon hit a permission error:\n%s", d.Logs())
	}
}

// inboxd runs the binary with env and returns its exit code and combined
// output.
func inboxd(t *testing.T, env []string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		t.Fatalf("inboxd %s: %v", strings.Join(args, " "), err)
	}
	return cmd.ProcessState.ExitCode(), string(out)
}

func rowID(t *testing.T, db *pgtest.DB, eventID string) int64 {
	t.Helper()
	var id int64
	if err := db.Pool.QueryRow(context.Background(), `SELECT id FROM inbox WHERE event_id = $1`, eventID).Scan(&id); err != nil {
		t.Fatalf("row %s: %v", eventID, err)
	}
	return id
}

// withUser returns the connection URL u with user name user and no
// password (the test server trusts 127.0.0.1).
func withUser(t *testing.T, u, user string) string {
	t.Helper()
	parsed, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	parsed.User = url.User(user)
	return parsed.String()
}

func randomSuffix(t *testing.T) string {
	t.Helper()
	b := make([]byte, 5)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
