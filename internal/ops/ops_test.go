package ops

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/driver/status"
	"github.com/inboxd/inboxd/internal/pgtest"
)

// bundle is a test's database and its operations.
type bundle struct {
	ctx  context.Context
	pool *pgxpool.Pool
	ops  *Ops
}

var alice = Operator{Name: "alice", From: "test"}

func setup(t *testing.T) bundle {
	t.Helper()
	db := pgtest.New(t)
	return bundle{ctx: context.Background(), pool: db.Pool, ops: New(Config{DB: db.Pool})}
}

// insert adds a row with sets (a SQL SET list on the new row, "" for none)
// and returns its id.
func (b bundle) insert(t *testing.T, eventID, eventType, set string) int64 {
	t.Helper()
	var id int64
	if err := b.pool.QueryRow(b.ctx, `INSERT INTO inbox (source, event_id, event_type, key, payload) VALUES ('src', $1, $2, convert_to('k-'||$1, 'UTF8'), 'p') RETURNING id`,
		eventID, eventType).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if set != "" {
		if _, err := b.pool.Exec(b.ctx, `UPDATE inbox SET `+set+` WHERE id = $1`, id); err != nil {
			t.Fatal(err)
		}
	}
	return id
}

func (b bundle) state(t *testing.T, id int64) (st, lastError string, due bool) {
	t.Helper()
	var le *string
	err := b.pool.QueryRow(b.ctx, `SELECT status, last_error, available_at <= now() FROM inbox WHERE id = $1`, id).Scan(&st, &le, &due)
	if err != nil {
		return "gone", "", false
	}
	if le != nil {
		lastError = *le
	}
	return st, lastError, due
}

func (b bundle) audit(t *testing.T) []AuditEntry {
	t.Helper()
	list, err := b.ops.Audit(b.ctx, AuditQuery{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	return list
}

const (
	dead       = "status = 'dead', attempts = 3, last_error = 'http 503'"
	retrying   = "attempts = 2, available_at = now() + interval '1 hour', last_error = 'http 429'"
	processing = "status = 'processing', attempts = 1, lease_token = 77, lease_expires_at = now() + interval '1 minute', locked_by = 'w1'"
	parked     = "available_at = '9999-12-31 00:00:00+00'"
)

func TestEveryActionNeedsAnOperator(t *testing.T) {
	b := setup(t)
	for _, op := range []Operator{{}, {Name: "  "}, {Name: "unknown@vm"}} {
		req := Request{Operator: op, Filter: Filter{Status: status.Dead}}
		for name, act := range map[string]func(context.Context, Request) (Result, error){
			"requeue": b.ops.Requeue, "discard": b.ops.Discard, "cancel": b.ops.Cancel, "retry": b.ops.RetryNow,
		} {
			if _, err := act(b.ctx, req); !errors.Is(err, ErrNoOperator) {
				t.Errorf("%s by %q: %v, want ErrNoOperator", name, op.Name, err)
			}
		}
		if _, err := b.ops.Pause(b.ctx, op, "*", ""); !errors.Is(err, ErrNoOperator) {
			t.Errorf("pause by %q: %v", op.Name, err)
		}
	}
	if n := len(b.audit(t)); n != 0 {
		t.Fatalf("refused actions wrote %d audit entries", n)
	}
}

func TestRequeueDeadOnFilterAndSelection(t *testing.T) {
	b := setup(t)
	d1 := b.insert(t, "d1", "order.created", dead)
	d2 := b.insert(t, "d2", "order.created", "status = 'dead', attempts = 3, last_error = 'http 422 unprocessable'")
	d3 := b.insert(t, "d3", "order.paid", dead)

	// A dry run on the error text counts and changes nothing.
	var seen []int64
	res, err := b.ops.Requeue(b.ctx, Request{Operator: alice, Filter: Filter{Status: status.Dead, Error: "422"}, DryRun: true,
		Each: func(v Visit) { seen = append(seen, v.ID) }})
	if err != nil || res.Rows != 1 || len(seen) != 1 || seen[0] != d2 {
		t.Fatalf("dry run: %+v %v, saw %v", res, err, seen)
	}
	if st, _, _ := b.state(t, d2); st != "dead" {
		t.Fatalf("dry run changed d2 to %s", st)
	}
	// The filter: only d2.
	res, err = b.ops.Requeue(b.ctx, Request{Operator: alice, Filter: Filter{Status: status.Dead, Error: "422"}})
	if err != nil || res.Rows != 1 {
		t.Fatalf("requeue: %+v %v", res, err)
	}
	if st, _, due := b.state(t, d2); st != "received" || !due {
		t.Fatalf("d2 is %s (due %v)", st, due)
	}
	// A selection: d3 alone.
	if res, err = b.ops.Requeue(b.ctx, Request{Operator: alice, Filter: Filter{Status: status.Dead, IDs: []int64{d3}}}); err != nil || res.Rows != 1 {
		t.Fatalf("requeue d3: %+v %v", res, err)
	}
	if st, _, _ := b.state(t, d1); st != "dead" {
		t.Fatalf("d1 is %s, want dead (matched by nothing)", st)
	}
	// By key.
	if res, err = b.ops.Requeue(b.ctx, Request{Operator: alice, Filter: Filter{Status: status.Dead, Key: []byte("k-d1")}}); err != nil || res.Rows != 1 {
		t.Fatalf("requeue by key: %+v %v", res, err)
	}
	a := b.audit(t)
	if len(a) != 4 {
		t.Fatalf("%d audit entries, want 4", len(a))
	}
	if a[3].Action != "requeue" || !a[3].DryRun || a[3].RowCount != 1 || !strings.Contains(a[3].Filter, `"error": "422"`) || a[3].Operator != "alice" {
		t.Errorf("the dry run's entry: %+v", a[3])
	}
	if a[1].DryRun || len(a[1].RowIDs) != 1 || a[1].RowIDs[0] != d3 {
		t.Errorf("the selection's entry: %+v", a[1])
	}
}

func TestDiscardUnparksTheRowBehind(t *testing.T) {
	b := setup(t)
	head := b.insert(t, "h", "order.created", dead)
	if _, err := b.pool.Exec(b.ctx, `UPDATE inbox SET key = 'K' WHERE id = $1`, head); err != nil {
		t.Fatal(err)
	}
	behind := b.insert(t, "b", "order.created", parked+", key = 'K'::bytea")
	res, err := b.ops.Discard(b.ctx, Request{Operator: alice, Filter: Filter{Status: status.Dead, IDs: []int64{head}}})
	if err != nil || res.Rows != 1 {
		t.Fatalf("discard: %+v %v", res, err)
	}
	if st, _, _ := b.state(t, head); st != "gone" {
		t.Fatalf("head is %s", st)
	}
	if st, _, due := b.state(t, behind); st != "received" || !due {
		t.Fatalf("the row behind is %s, due %v: not unparked", st, due)
	}
	// A received row is discarded too; a reserved one is not.
	w := b.insert(t, "w", "order.created", "")
	r := b.insert(t, "r", "order.created", "lease_token = 5, lease_expires_at = now() + interval '1 minute', available_at = now() + interval '1 minute'")
	res, err = b.ops.Discard(b.ctx, Request{Operator: alice, Filter: Filter{Status: status.Received, EventType: "order.created"}})
	if err != nil || res.Rows != 2 { // w and the unparked row
		t.Fatalf("discard received: %+v %v", res, err)
	}
	if st, _, _ := b.state(t, w); st != "gone" {
		t.Errorf("w is %s", st)
	}
	if st, _, _ := b.state(t, r); st != "received" {
		t.Errorf("the reserved row is %s", st)
	}
}

func TestCancelFencesTheWorker(t *testing.T) {
	b := setup(t)
	p := b.insert(t, "p", "order.created", processing)
	w := b.insert(t, "w", "order.created", retrying)
	other := b.insert(t, "o", "order.paid", "")
	dry, err := b.ops.Cancel(b.ctx, Request{Operator: alice, Filter: Filter{EventType: "order.created"}, DryRun: true})
	if err != nil || dry.Rows != 2 {
		t.Fatalf("dry run: %+v %v", dry, err)
	}
	res, err := b.ops.Cancel(b.ctx, Request{Operator: alice, Filter: Filter{EventType: "order.created"}, Reason: "bad deploy"})
	if err != nil || res.Rows != 2 {
		t.Fatalf("cancel: %+v %v", res, err)
	}
	for _, id := range []int64{p, w} {
		st, le, _ := b.state(t, id)
		if st != "dead" || le != "cancelled by alice: bad deploy" {
			t.Errorf("row %d: %s %q", id, st, le)
		}
	}
	if st, _, _ := b.state(t, other); st != "received" {
		t.Errorf("the other route's row is %s", st)
	}
	// The worker's completion, fenced by its token, changes nothing.
	done, err := b.pool.Exec(b.ctx, `UPDATE inbox SET status = 'processed' WHERE id = $1 AND lease_token = 77`, p)
	if err != nil || done.RowsAffected() != 0 {
		t.Fatalf("the fenced completion: %v %v", done, err)
	}
	a := b.audit(t)
	if a[0].Action != "cancel" || a[0].Detail != "cancelled by alice: bad deploy" || a[0].RowCount != 2 {
		t.Errorf("entry: %+v", a[0])
	}
}

func TestRetryNowLeavesParkedRows(t *testing.T) {
	b := setup(t)
	w := b.insert(t, "w", "t", retrying)
	pk := b.insert(t, "pk", "t", parked)
	res, err := b.ops.RetryNow(b.ctx, Request{Operator: alice, Filter: Filter{Source: "src"}})
	if err != nil || res.Rows != 1 {
		t.Fatalf("retry now: %+v %v", res, err)
	}
	if _, _, due := b.state(t, w); !due {
		t.Error("the retrying row is not due")
	}
	if _, _, due := b.state(t, pk); due {
		t.Error("the parked row was made due")
	}
}

func TestPauseChecksTheRoute(t *testing.T) {
	b := setup(t)
	b.insert(t, "x", "order.created", "") // a row alone does not make a route known: no index reads types
	if _, err := b.ops.Pause(b.ctx, alice, "order.created", "typo"); !errors.Is(err, ErrUnknownRoute) {
		t.Fatalf("pause of a route without outcomes: %v", err)
	}
	if err := driver.AddRollup(b.ctx, b.pool, []driver.RollupCell{{Span: driver.SpanMinute, At: time.Now().Truncate(time.Minute),
		Route: "order.created", Processed: 1, Latency: []int64{1}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ops.Pause(b.ctx, alice, "order.nonexistent", "typo"); !errors.Is(err, ErrUnknownRoute) {
		t.Fatalf("pause of an unknown route: %v", err)
	}
	if _, err := b.ops.Pause(b.ctx, alice, "order.created", "deploy"); err != nil {
		t.Fatal(err)
	}
	o := New(Config{DB: b.pool, Routes: func() ([]handlers.RouteConfig, error) { return []handlers.RouteConfig{{Type: "order.future"}}, nil }})
	if _, err := o.Pause(b.ctx, alice, "order.future", ""); err != nil {
		t.Fatalf("a route of the routes file: %v", err)
	}
	paused, err := driver.PausedRoutes(b.ctx, b.pool)
	if err != nil || len(paused) != 2 || paused[0].PausedBy != "alice" {
		t.Fatalf("paused: %+v %v", paused, err)
	}
	if _, err := b.ops.Resume(b.ctx, alice, "order.created"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ops.Resume(b.ctx, alice, "order.created"); !errors.Is(err, ErrNotPaused) {
		t.Fatalf("second resume: %v", err)
	}
	a := b.audit(t)
	if len(a) != 4 || a[3].Action != "pause" || a[3].Detail != "route order.created: deploy" || a[0].Error == "" {
		t.Fatalf("audit: %+v", a)
	}
}

func TestRecordSignIn(t *testing.T) {
	b := setup(t)
	if err := b.ops.Record(b.ctx, Operator{Name: "bob", From: "console 192.0.2.1"}, ActSignIn, "users file"); err != nil {
		t.Fatal(err)
	}
	a := b.audit(t)
	if len(a) != 1 || a[0].Action != "sign_in" || a[0].Origin != "console 192.0.2.1" {
		t.Fatalf("%+v", a)
	}
}

func TestListViews(t *testing.T) {
	b := setup(t)
	r1 := b.insert(t, "r1", "order.created", retrying)
	w1 := b.insert(t, "w1", "order.created", "")
	head := b.insert(t, "h", "order.created", dead+", key = 'K'::bytea")
	pk := b.insert(t, "pk", "order.created", parked+", key = 'K'::bytea")
	p1 := b.insert(t, "p1", "order.created", processing)
	res := b.insert(t, "res", "order.created", "lease_token = 9, lease_expires_at = now() + interval '30 second', available_at = now() + interval '30 second', attempts = 1")
	done := b.insert(t, "done", "order.paid", "status = 'processed', processed_at = received_at + interval '3 second'")
	rej := b.insert(t, "rej", "unknown", "status = 'rejected', last_error = 'missing event_type'")
	o := New(Config{DB: b.pool, MaxAttempts: func(string) int { return 25 }})
	want := map[View][]int64{
		ViewRetrying: {r1}, ViewWaiting: {w1, pk}, ViewProcessing: {res, p1}, // by lease expiry: the reservation's ends first
		ViewProcessed: {done}, ViewDead: {head}, ViewRejected: {rej},
	}
	for v, ids := range want {
		p, err := o.List(b.ctx, ListQuery{View: v})
		if err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		var got []int64
		for _, r := range p.Rows {
			got = append(got, r.ID)
		}
		if len(got) != len(ids) {
			t.Errorf("%s: %v, want %v", v, got, ids)
			continue
		}
		for i := range ids {
			if got[i] != ids[i] {
				t.Errorf("%s: %v, want %v", v, got, ids)
			}
		}
		for _, r := range p.Rows {
			switch {
			case r.ID == r1 && (r.MaxAttempts != 25 || r.Attempts != 2 || r.LastError != "http 429"):
				t.Errorf("retrying row: %+v", r)
			case r.ID == pk && r.Behind != "row "+itoa(head)+" (dead)":
				t.Errorf("parked row behind %q", r.Behind)
			case r.ID == p1 && (r.Worker != "w1" || r.LeaseExpiresAt == nil):
				t.Errorf("processing row: %+v", r)
			case r.ID == done && r.Took != 3*time.Second:
				t.Errorf("processed row took %s", r.Took)
			}
		}
	}
	// Filters and keyset pages.
	for i := 0; i < 5; i++ {
		b.insert(t, "page"+itoa(int64(i)), "page.type", dead)
	}
	var all []int64
	after := ""
	for pages := 0; pages < 10; pages++ {
		p, err := o.List(b.ctx, ListQuery{View: ViewDead, Filter: Filter{EventType: "page.type"}, Limit: 2, After: after})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range p.Rows {
			all = append(all, r.ID)
		}
		if after = p.Next; after == "" {
			break
		}
	}
	if len(all) != 5 || all[0] < all[4] {
		t.Fatalf("pages of dead rows: %v", all)
	}
	p, err := o.List(b.ctx, ListQuery{View: ViewWaiting, Filter: Filter{Key: []byte("K")}})
	if err != nil || len(p.Rows) != 1 || p.Rows[0].ID != pk {
		t.Fatalf("by key: %+v %v", p, err)
	}
}

func itoa(n int64) string { return strconvFormat(n) }

func strconvFormat(n int64) string { return strconv.FormatInt(n, 10) }
