package pubtest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/inboxd/inboxd/internal/pgtest"
)

// InteropRow is an outbox row the interop tests write and then look for.
type InteropRow struct {
	EventID, Key string
	Headers      map[string]string
	Payload      []byte
}

// WriteRows inserts rows for dest with plain SQL, as any service would.
func WriteRows(t *testing.T, db *pgtest.DB, dest string, rows []InteropRow) {
	t.Helper()
	for _, r := range rows {
		hs, err := json.Marshal(r.Headers)
		if err != nil {
			t.Fatal(err)
		}
		var key any
		if r.Key != "" {
			key = r.Key
		}
		if _, err := db.Pool.Exec(context.Background(),
			`INSERT INTO outbox (destination, event_id, event_type, key, headers, payload) VALUES ($1, $2, 'order.shipped', $3, $4, $5)`,
			dest, r.EventID, key, hs, r.Payload); err != nil {
			t.Fatal(err)
		}
	}
}

// InteropRows are n rows over three keys: JSON payloads that compress well
// (the relay's default codec must then still be one every client reads),
// and one of bytes that are not text, NUL and 0xff among them.
func InteropRows(n int) []InteropRow {
	var rows []InteropRow
	for i := range n {
		payload := fmt.Appendf(nil, `{"order_id":%d,"status":"shipped","lines":[%s]}`, i,
			strings.TrimSuffix(strings.Repeat(`{"sku":"SKU-0001","qty":1,"price":"9.90"},`, 20), ","))
		if i == 3 {
			payload = []byte{0, 1, 2, 0xff, 0xfe, '\n', 0, 'x'}
		}
		rows = append(rows, InteropRow{EventID: fmt.Sprintf("ev-%03d", i), Key: fmt.Sprintf("order-%d", i%3),
			Headers: map[string]string{"tenant": "acme", "note": "déjà vu ✓"}, Payload: payload})
	}
	return rows
}
