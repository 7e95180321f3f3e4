package app

import (
	"context"
	"strings"
	"testing"

	"github.com/inboxd/inboxd/ingest"

	"github.com/segmentio/kafka-go"

	"github.com/inboxd/inboxd/internal/driver"
	"github.com/inboxd/inboxd/internal/driver/status"
	"github.com/inboxd/inboxd/internal/ingestcore"
	"github.com/inboxd/inboxd/internal/ingestcore/kafkamap"
	"github.com/inboxd/inboxd/internal/pgtest"
)

// ingestMessage maps m with opts and stores the row as ingest does
// (driver.InsertBatch), returning its id.
func ingestMessage(t *testing.T, db *pgtest.DB, m kafka.Message, opts ingest.MapOptions) (int64, ingestcore.Row) {
	t.Helper()
	ctx := context.Background()
	r := kafkamap.MapMessage(m, opts)
	n, _, err := driver.InsertBatch(ctx, db.Pool, []driver.NewRow{{
		Source: r.Source, EventID: r.EventID, EventType: r.EventType, Key: r.Key, Payload: r.Payload,
		Headers: r.Headers, Status: status.Status(r.Status), LastError: r.LastError, Partition: r.Partition, Offset: r.Offset,
	}}, nil)
	if err != nil || n != 1 {
		t.Fatalf("insert %s: %d rows, %v", r.EventID, n, err)
	}
	id, _, ok, err := driver.EventOwner(ctx, db.Pool, r.Source, r.EventID)
	if err != nil || !ok {
		t.Fatalf("look up %s: %v, %v", r.EventID, ok, err)
	}
	return id, r
}

func headers(kv ...string) []kafka.Header {
	var hs []kafka.Header
	for i := 0; i < len(kv); i += 2 {
		hs = append(hs, kafka.Header{Key: kv[i], Value: []byte(kv[i+1])})
	}
	return hs
}

// Rejected rows are re-mapped with the current configuration: the ones that
// now map get their event id and type and go to received; one whose event
// is already in the inbox stays rejected (or is deleted with
// --drop-duplicates); one that still does not map, or whose payload was not
// stored, stays rejected and the output says why.
func TestRequeueRejectedRemapsWithTheCurrentConfiguration(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	strict := ingest.MapOptions{MaxPayload: 1024} // the default headers only
	msg := func(offset int64, value string, hs ...kafka.Header) kafka.Message {
		return kafka.Message{Topic: "orders", Partition: 2, Offset: offset, Key: []byte("k"), Value: []byte(value), Headers: hs}
	}
	// The producer sent the type in a header called "kind", and a binary
	// trace header that must come back byte for byte.
	binary := string([]byte{0, 0xff, 'x'})
	kindID, kindRow := ingestMessage(t, db, msg(10, `{"n":1}`, append(headers("event_id", "ev-10", "kind", "order.created"),
		kafka.Header{Key: "trace", Value: []byte(binary)})...), strict)
	// Id and type only in the JSON payload.
	jsonID, _ := ingestMessage(t, db, msg(11, `{"id":"ev-11","type":"order.paid"}`), strict)
	// The event arrived again, accepted, before the requeue.
	dupID, _ := ingestMessage(t, db, msg(12, `{}`, headers("event_id", "ev-12", "kind", "order.created")...), strict)
	ingestMessage(t, db, msg(13, `{}`, headers("event_id", "ev-12", "event_type", "order.created")...), strict)
	dup2ID, _ := ingestMessage(t, db, msg(14, `{}`, headers("event_id", "ev-12", "kind", "order.created")...), strict)
	// Nothing to find an id in, whatever the configuration.
	hopelessID, _ := ingestMessage(t, db, msg(15, `not json`), strict)
	// The event id header holds a NUL byte: base64 in the headers column,
	// decoded back, still invalid.
	nulID, _ := ingestMessage(t, db, msg(16, `{}`, headers("event_id", "a\x00b", "kind", "t")...), strict)
	// Oversize: the payload was not stored.
	bigID, _ := ingestMessage(t, db, msg(17, strings.Repeat("x", 2000), headers("event_id", "ev-17", "event_type", "t")...), strict)
	if kindRow.Status != ingestcore.StatusRejected || kindRow.EventID != "orders/2/10" {
		t.Fatalf("setup: %+v", kindRow)
	}
	var stored string
	if err := db.Pool.QueryRow(context.Background(), `SELECT headers->'trace'->>'base64' FROM inbox WHERE id = $1`, kindID).Scan(&stored); err != nil || stored == "" {
		t.Fatalf("setup: the binary header is not stored as base64: %q %v", stored, err)
	}

	fixed := []string{"INBOXD_DATABASE_URL=" + db.URL,
		"INBOXD_EVENT_TYPE_HEADERS=event_type,kind",
		"INBOXD_EVENT_ID_JSON_FIELD=id", "INBOXD_EVENT_TYPE_JSON_FIELD=type",
		"INBOXD_MAX_PAYLOAD=1024"}

	// Before the fix nothing maps: exit 1, every row says why.
	code, out, _ := runMain(t, []string{"INBOXD_DATABASE_URL=" + db.URL, "INBOXD_MAX_PAYLOAD=1024"}, "requeue", "--status", "rejected", "--all")
	if code != ExitFailure || !strings.Contains(out, "id "+itoa(kindID)+": still rejected with the current configuration: missing event type") {
		t.Fatalf("requeue with the old configuration: exit %d\n%s", code, out)
	}

	// A dry run with the fixed configuration says what would happen and
	// changes nothing.
	code, out, _ = runMain(t, fixed, "requeue", "--status", "rejected", "--all", "--dry-run")
	if code != ExitOK || !strings.Contains(out, "id "+itoa(kindID)+": would requeue as event id ev-10, type order.created") {
		t.Fatalf("dry run: exit %d\n%s", code, out)
	}
	if st := stateOf(t, db, kindID); st.Status != "rejected" {
		t.Fatalf("dry run changed row %d to %s", kindID, st.Status)
	}

	code, out, stderr := runMain(t, fixed, "requeue", "--status", "rejected", "--all")
	if code != ExitOK {
		t.Fatalf("requeue --status rejected: exit %d\n%s%s", code, out, stderr)
	}
	for _, want := range []string{
		"id " + itoa(kindID) + ": requeued as event id ev-10, type order.created",
		"id " + itoa(jsonID) + ": requeued as event id ev-11, type order.paid",
		"id " + itoa(dupID) + ": maps to event id ev-12, type order.created, which row ",
		"already holds: left rejected (--drop-duplicates deletes it)",
		"id " + itoa(hopelessID) + ": still rejected with the current configuration: missing event id",
		"id " + itoa(nulID) + ": still rejected with the current configuration: invalid event id in header event_id: contains a NUL byte",
		"id " + itoa(bigID) + ": cannot be requeued: its payload was not stored (payload of 2000 bytes exceeds INBOXD_MAX_PAYLOAD",
		"requeued 2 of 7 rejected rows: 2 already in the inbox (left rejected), 2 still rejected, 1 oversize, not stored",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
	var eventID, eventType, status string
	var key, payload []byte
	var trace string
	if err := db.Pool.QueryRow(context.Background(), `
		SELECT event_id, event_type, status, key, payload, headers->'trace'->>'base64' FROM inbox WHERE id = $1`, kindID).
		Scan(&eventID, &eventType, &status, &key, &payload, &trace); err != nil {
		t.Fatal(err)
	}
	if eventID != "ev-10" || eventType != "order.created" || status != "received" || string(key) != "k" ||
		string(payload) != `{"n":1}` || trace != stored {
		t.Fatalf("requeued rejected row: %s %s %s key %q payload %q trace %q", eventID, eventType, status, key, payload, trace)
	}
	if st := stateOf(t, db, kindID); st.Attempts != 0 || !st.DueNow || st.LastError == nil || !strings.Contains(*st.LastError, "missing event type") {
		t.Fatalf("requeued rejected row: %+v, last_error %s", st, deref(st.LastError))
	}

	// --drop-duplicates deletes the rejected copies of an event already in
	// the inbox; what is left still does not map: nothing to requeue, but
	// something was done.
	code, out, _ = runMain(t, fixed, "requeue", "--status", "rejected", "--all", "--drop-duplicates")
	if code != ExitOK || !strings.Contains(out, "id "+itoa(dupID)+": maps to event id ev-12, type order.created, which row ") ||
		!strings.Contains(out, "2 already in the inbox (deleted)") {
		t.Fatalf("--drop-duplicates: exit %d\n%s", code, out)
	}
	var left int
	if err := db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM inbox WHERE id = ANY ($1)`, []int64{dupID, dup2ID}).Scan(&left); err != nil || left != 0 {
		t.Fatalf("duplicates left: %d %v", left, err)
	}
	if code, _, stderr := runMain(t, fixed, "requeue", "--all", "--drop-duplicates"); code != ExitUsage || !strings.Contains(stderr, "--status rejected") {
		t.Fatalf("--drop-duplicates on dead rows: exit %d %s", code, stderr)
	}
}

func TestDecodeHeaders(t *testing.T) {
	t.Parallel()
	hs, err := decodeHeaders([]byte(`{"b":{"base64":"AP8="},"a":"text","n":5,"o":{"x":1}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := []kafka.Header{{Key: "a", Value: []byte("text")}, {Key: "b", Value: []byte{0, 0xff}},
		{Key: "n", Value: []byte("5")}, {Key: "o", Value: []byte(`{"x":1}`)}}
	if len(hs) != len(want) {
		t.Fatalf("got %q", hs)
	}
	for i := range want {
		if hs[i].Key != want[i].Key || string(hs[i].Value) != string(want[i].Value) {
			t.Errorf("header %d = %q %q, want %q %q", i, hs[i].Key, hs[i].Value, want[i].Key, want[i].Value)
		}
	}
	if _, err := decodeHeaders([]byte(`{"b":{"base64":"!!"}}`)); err == nil {
		t.Error("bad base64 accepted")
	}
}

// Reproduction from the reliability report: a message with a 3,000-byte key
// became a rejected placeholder (the key index's B-tree refused it,
// SQLSTATE 54000), and `requeue --status rejected` answered "still
// rejected" for the same reason. Now the row requeues, key and all. Rows
// rejected because their key or headers were over the bound cannot: what
// was too big was not stored, and the output says which.
func TestRequeueRejectedLongKeyAndUnstoredParts(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	key := make([]byte, 3000) // random: a B-tree compresses a repetitive key
	for i := range key {
		key[i] = byte(i*131 + i*i*7 + i>>3)
	}
	// The placeholder ingest stored when the database refused the row: the
	// message as it came, status rejected.
	var longID int64
	if err := db.Pool.QueryRow(ctx, `
		INSERT INTO inbox (source, event_id, event_type, key, payload, headers, status, last_error,
		                   kafka_topic, kafka_partition, kafka_offset)
		VALUES ('orders', 'orders/0/1', '', $1, 'v', '{"event_id": "long-key", "event_type": "order.created"}', 'rejected',
		        'database refused the row: index row size 3032 exceeds btree version 4 maximum 2704 for index "inbox_key_idx" (SQLSTATE 54000)',
		        'orders', 0, 1)
		RETURNING id`, key).Scan(&longID); err != nil {
		t.Fatal(err)
	}
	opts := ingest.MapOptions{MaxHeaders: 1024}
	bigHeadersID, r := ingestMessage(t, db, kafka.Message{Topic: "orders", Offset: 2, Value: []byte("v"),
		Headers: headers("event_id", "big-headers", "event_type", "order.created", "trace", strings.Repeat("t", 2000))}, opts)
	if r.Status != ingestcore.StatusRejected {
		t.Fatalf("setup: headers over the bound: %+v", r)
	}
	bigKeyID, r := ingestMessage(t, db, kafka.Message{Topic: "orders", Offset: 3, Key: make([]byte, ingest.MaxKeyBytes+1), Value: []byte("v"),
		Headers: headers("event_id", "big-key", "event_type", "order.created")}, opts)
	if r.Status != ingestcore.StatusRejected {
		t.Fatalf("setup: key over the bound: %+v", r)
	}

	code, out, stderr := runMain(t, []string{"INBOXD_DATABASE_URL=" + db.URL, "INBOXD_MAX_HEADERS=1024"}, "requeue", "--status", "rejected", "--all")
	if code != ExitOK {
		t.Fatalf("requeue --status rejected: exit %d\n%s%s", code, out, stderr)
	}
	for _, want := range []string{
		"id " + itoa(longID) + ": requeued as event id long-key, type order.created",
		"id " + itoa(bigHeadersID) + ": cannot be requeued: its headers were not stored (headers of 2047 bytes exceed INBOXD_MAX_HEADERS (1024))",
		"id " + itoa(bigKeyID) + ": cannot be requeued: its key was not stored (key of 4097 bytes exceeds the limit of 4096 bytes",
		"requeued 1 of 3 rejected rows: 2 oversize, not stored",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
	var status string
	var stored []byte
	if err := db.Pool.QueryRow(ctx, `SELECT status, key FROM inbox WHERE id = $1`, longID).Scan(&status, &stored); err != nil {
		t.Fatal(err)
	}
	if status != "received" || string(stored) != string(key) {
		t.Errorf("requeued row with a 3,000-byte key: %s, key of %d bytes", status, len(stored))
	}
}
