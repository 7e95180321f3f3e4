package app

import (
	"context"
	"strings"
	"testing"

	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/sensitive"
)

// The reported case (issue 25, item 11): a row's credential-like headers
// (x-api-key, authorization, …) were printed as they are. `inboxd show`
// masks their values, in text and in JSON, and keeps every other header.
func TestShowMasksCredentialHeaders(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	var id int64
	if err := db.Pool.QueryRow(context.Background(), `INSERT INTO inbox (source, event_id, event_type, status, headers)
		VALUES ('hooks', 'evt-1', 'order.paid', 'dead',
		        '{"x-api-key":"sk_live_123","authorization":"Bearer sk_live_456","content-type":"application/json"}')
		RETURNING id`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	env := []string{"INBOXD_DATABASE_URL=" + db.URL}
	for _, args := range [][]string{{"show", itoa(id)}, {"show", "--json", itoa(id)}} {
		code, out, stderr := runMain(t, env, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d\n%s", args, code, stderr)
		}
		if strings.Contains(out, "sk_live") || !strings.Contains(out, sensitive.Masked) ||
			!strings.Contains(out, "x-api-key") || !strings.Contains(out, "application/json") {
			t.Errorf("%v: the credential headers are not masked (or the others are gone):\n%s", args, out)
		}
	}
}
