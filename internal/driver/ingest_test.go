package driver

import (
	"context"
	"testing"

	"github.com/inboxd/inboxd/internal/driver/status"
	"github.com/inboxd/inboxd/internal/pgtest"
)

func TestInsertBatchSkipsDuplicatesAndSpotsIdentityClash(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	rows := []NewRow{
		{Source: "orders", EventID: "e1", EventType: "t", Payload: []byte("a"), Headers: []byte("{}"), Status: status.Received, Offset: 1},
		{Source: "orders", EventID: "e1", EventType: "t", Payload: []byte("b"), Headers: []byte("{}"), Status: status.Received, Offset: 2},
		{Source: "orders", EventID: "orders/0/3", Payload: []byte("c"), Headers: []byte("{}"), Status: status.Rejected,
			LastError: "why", Offset: 3},
	}
	n, _, err := InsertBatch(ctx, db.Pool, rows, nil)
	if err != nil || n != 2 {
		t.Fatalf("InsertBatch = %d, %v; want 2, nil", n, err)
	}
	var lastError *string
	var st string
	if err := db.Pool.QueryRow(ctx, `SELECT status, last_error FROM inbox WHERE event_id = 'e1'`).Scan(&st, &lastError); err != nil {
		t.Fatal(err)
	}
	if st != string(status.Received) || lastError != nil {
		t.Errorf("row e1: status %s, last_error %v; want received, NULL", st, lastError)
	}

	counts, err := StatusCounts(ctx, db.Pool)
	if err != nil || len(counts) != 2 || counts[status.Received] != 1 || counts[status.Rejected] != 1 {
		t.Errorf("StatusCounts = %v, %v; want 1 received, 1 rejected", counts, err)
	}

	// A row inserted with an explicit id ahead of the identity sequence.
	if _, err := db.Pool.Exec(ctx, `INSERT INTO inbox (id, source, event_id, event_type, payload)
		OVERRIDING SYSTEM VALUE SELECT max(id) + 1, 'x', 'x', 't', '' FROM inbox`); err != nil {
		t.Fatal(err)
	}
	_, _, err = InsertBatch(ctx, db.Pool, []NewRow{{Source: "orders", EventID: "e2", EventType: "t", Payload: []byte{},
		Headers: []byte("{}"), Status: status.Received}}, nil)
	if !IdentityClash(err) {
		t.Errorf("InsertBatch over a taken id: %v, want an identity clash", err)
	}
	if _, _, err := InsertBatch(ctx, db.Pool, rows[:1], nil); IdentityClash(err) || err != nil {
		t.Errorf("a duplicate is no clash: %v", err)
	}
}
