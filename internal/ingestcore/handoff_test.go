package ingestcore

import (
	"context"
	"testing"

	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/pgtest"
)

// fakeHandOff reserves every received row and records what it is told.
type fakeHandOff struct {
	reserved  []*driver.Reservation
	delivered [][]driver.Reserved
	cancelled int
}

func (f *fakeHandOff) Reserve(rows []driver.NewRow) *driver.Reservation {
	res := &driver.Reservation{Token: int64(len(f.reserved) + 1), Lease: 30e9, Worker: "w", Pos: make([]int32, len(rows))}
	n := int32(0)
	for i, r := range rows {
		if string(r.Status) == StatusReceived {
			n++
			res.Pos[i] = n
		}
	}
	f.reserved = append(f.reserved, res)
	return res
}

func (f *fakeHandOff) Deliver(_ context.Context, _ *driver.Reservation, _ []driver.NewRow, got []driver.Reserved) {
	f.delivered = append(f.delivered, got)
}

func (f *fakeHandOff) Cancel(*driver.Reservation) { f.cancelled++ }

// The writer every source shares hands rows off through HandOff: the
// reserved rows it inserted are delivered after the commit (duplicates
// and rejected rows never), and a failed write cancels its reservation.
func TestPgWriterHandsOff(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	f := &fakeHandOff{}
	w := PGWriter{Pool: db.Pool, HandOff: f}
	rows := []Row{
		{Source: "s", EventID: "e1", EventType: "t", Payload: []byte("a"), Headers: []byte("{}"), Status: StatusReceived},
		{Source: "s", EventID: "s/0/1", Payload: []byte("b"), Headers: []byte("{}"), Status: StatusRejected, LastError: "why"},
		{Source: "s", EventID: "e2", EventType: "t", Payload: []byte("c"), Headers: []byte("{}"), Status: StatusReceived},
	}
	if n, err := w.WriteBatch(ctx, rows); err != nil || n != 3 {
		t.Fatalf("WriteBatch = %d, %v; want 3", n, err)
	}
	if len(f.delivered) != 1 || len(f.delivered[0]) != 2 || f.delivered[0][0].Pos != 1 || f.delivered[0][1].Pos != 2 {
		t.Fatalf("delivered %+v; want the two received rows", f.delivered)
	}
	// Again with one new row: the duplicates are not delivered.
	rows = append(rows, Row{Source: "s", EventID: "e3", EventType: "t", Payload: []byte("d"), Headers: []byte("{}"), Status: StatusReceived})
	if n, err := w.WriteBatch(ctx, rows); err != nil || n != 1 {
		t.Fatalf("WriteBatch = %d, %v; want 1", n, err)
	}
	if got := f.delivered[1]; len(got) != 1 || got[0].Pos != 3 {
		t.Fatalf("delivered %+v; want e3 alone (place 3)", got)
	}
	var reserved int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM inbox WHERE lease_token IS NOT NULL AND status = 'received'
		AND attempts = 1 AND available_at > now()`).Scan(&reserved); err != nil || reserved != 3 {
		t.Fatalf("%d reserved rows, %v; want 3", reserved, err)
	}
	// A write that fails cancels its reservation and delivers nothing.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := w.WriteBatch(cctx, rows[3:]); err == nil {
		t.Fatal("WriteBatch on a cancelled context succeeded")
	}
	if f.cancelled != 1 || len(f.delivered) != 2 {
		t.Fatalf("after a failed write: %d cancelled, %d delivered; want 1, 2", f.cancelled, len(f.delivered))
	}
}
