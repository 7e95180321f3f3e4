package kafka

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Messages land in the inbox with every column right; malformed ones become
// rejected rows and the committed offsets move past them; a duplicate event
// id gives one row.
func TestIngestFromKafka(t *testing.T) {
	t.Parallel()
	b := setupKafka(t, 2)

	binary := []byte{0, 'x', 0xff, 0xfe, 0, 0xc3}
	big := bytes.Repeat([]byte("B"), 2000)
	bigSum := sha256.Sum256(big)

	good := b.event(0, "e1", "order.created", []byte(`{"order":1}`))
	good.Key = []byte("k1")
	good.Headers = append(good.Headers, kgo.RecordHeader{Key: "traceparent", Value: []byte("00-abc-def-01")})
	cloud := &kgo.Record{Topic: b.topic, Partition: 0, Value: []byte("ce"), Headers: []kgo.RecordHeader{
		{Key: "ce_id", Value: []byte("e2")}, {Key: "ce_type", Value: []byte("com.example.cloud")}}}
	noID := b.event(0, "", "order.created", []byte("no id"))
	noID.Key = []byte("poison-key")
	noType := b.event(1, "e3", "", []byte("no type"))
	oversize := b.event(1, "e4", "order.created", big)
	bin := b.event(1, "e5", "blob", binary)
	binHeader := b.event(1, "e6", "blob", []byte("x"))
	binHeader.Headers = append(binHeader.Headers, kgo.RecordHeader{Key: "sig", Value: []byte{0, 1, 2}})
	dup := b.event(0, "e1", "order.created", []byte(`{"order":"again"}`))

	b.produce(t, good, cloud, noID, noType, oversize, bin, binHeader, dup)

	r := b.start(t, b.config(), "c1")
	b.waitCommitted(t, 30*time.Second)

	rows := readRows(t, b.db)
	if len(rows) != 7 {
		t.Fatalf("%d rows, want 7: %v", len(rows), rows)
	}
	check := func(key string, want inboxRow, wantErr string) {
		t.Helper()
		got, ok := rows["orders "+key]
		if !ok {
			t.Errorf("no row %s", key)
			return
		}
		if got.Status != want.Status || got.EventType != want.EventType || !bytes.Equal(got.Payload, want.Payload) ||
			!bytes.Equal(got.Key, want.Key) || (got.Key == nil) != (want.Key == nil) ||
			*got.Topic != "orders" || *got.Partition != *want.Partition || *got.Offset != *want.Offset {
			t.Errorf("row %s:\n got %+v\nwant %+v", key, got, want)
		}
		gotErr := ""
		if got.LastError != nil {
			gotErr = *got.LastError
		}
		if gotErr != wantErr {
			t.Errorf("row %s last_error = %q, want %q", key, gotErr, wantErr)
		}
	}
	p := func(v int32) *int32 { return &v }
	o := func(v int64) *int64 { return &v }
	check("e1", inboxRow{Status: "received", EventType: "order.created", Key: []byte("k1"), Payload: []byte(`{"order":1}`), Partition: p(0), Offset: o(0)}, "")
	check("e2", inboxRow{Status: "received", EventType: "com.example.cloud", Payload: []byte("ce"), Partition: p(0), Offset: o(1)}, "")
	check("orders/0/2", inboxRow{Status: "rejected", EventType: "order.created", Key: []byte("poison-key"), Payload: []byte("no id"), Partition: p(0), Offset: o(2)},
		"missing event id (headers event_id, ce_id)")
	check("orders/1/0", inboxRow{Status: "rejected", EventType: "", Payload: []byte("no type"), Partition: p(1), Offset: o(0)},
		"missing event type (headers event_type, ce_type)")
	check("orders/1/1", inboxRow{Status: "rejected", EventType: "order.created", Payload: []byte{}, Partition: p(1), Offset: o(1)},
		"payload of 2000 bytes exceeds INBOXD_MAX_PAYLOAD (1024); sha256="+hex.EncodeToString(bigSum[:]))
	check("e5", inboxRow{Status: "received", EventType: "blob", Payload: binary, Partition: p(1), Offset: o(2)}, "")
	check("e6", inboxRow{Status: "received", EventType: "blob", Payload: []byte("x"), Partition: p(1), Offset: o(3)}, "")

	if h := rows["orders e1"].Headers; h["traceparent"] != "00-abc-def-01" || h["event_id"] != "e1" || h["event_type"] != "order.created" {
		t.Errorf("e1 headers = %v", h)
	}
	if sig, _ := rows["orders e6"].Headers["sig"].(map[string]any); sig["base64"] != "AAEC" {
		t.Errorf("e6 headers = %v, want sig as base64", rows["orders e6"].Headers)
	}
	if h := rows["orders orders/0/2"].Headers; h["event_type"] != "order.created" {
		t.Errorf("rejected row keeps no headers: %v", h)
	}

	m := r.c.Metrics
	for name, want := range map[string]float64{
		"fetched":      8,
		"inserted":     7,
		"duplicates":   1,
		"missing_id":   1,
		"missing_type": 1,
		"oversize":     1,
		"ready":        1,
	} {
		var got float64
		switch name {
		case "fetched":
			got = testutil.ToFloat64(m.MessagesFetched)
		case "inserted":
			got = testutil.ToFloat64(m.RowsInserted)
		case "duplicates":
			got = testutil.ToFloat64(m.Duplicates)
		case "ready":
			got = testutil.ToFloat64(m.Ready)
		default:
			got = testutil.ToFloat64(m.Rejected.WithLabelValues(name))
		}
		if got != want {
			t.Errorf("metric %s = %v, want %v", name, got, want)
		}
	}
	if !r.c.Ready() {
		t.Error("Ready() = false")
	}
	if err := r.c.Healthy(); err != nil {
		t.Errorf("Healthy: %v", err)
	}
}

// Messages delivered again (here: the group's offsets rewound while the
// consumer was stopped, as after a lost commit) are absorbed by the unique
// index: one row per event, the redeliveries counted as duplicates.
func TestRedeliveryAfterRestartIsDeduplicated(t *testing.T) {
	t.Parallel()
	b := setupKafka(t, 2)
	const n = 40
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, b.event(int32(i%2), fmt.Sprintf("ev-%d", i), "t", []byte(fmt.Sprint(i))))
	}
	b.produce(t, recs...)

	first := b.start(t, b.config(), "first")
	b.waitCommitted(t, 30*time.Second)
	if err := first.stop(); err != nil {
		t.Fatal(err)
	}
	if got := b.countRows(t, "inbox"); got != n {
		t.Fatalf("%d rows after the first run, want %d", got, n)
	}

	// Rewind the group to the start, as if the commits had been lost.
	ctx := t.Context()
	rewind := kadm.Offsets{}
	for p := range int32(2) {
		rewind.Add(kadm.Offset{Topic: b.topic, Partition: p, At: 0, LeaderEpoch: -1})
	}
	if err := b.admin.CommitAllOffsets(ctx, b.group, rewind); err != nil {
		t.Fatalf("rewind group offsets: %v", err)
	}
	// And produce a few more, some of them repeating old event ids.
	b.produce(t, b.event(0, "ev-0", "t", []byte("again")), b.event(1, "ev-new", "t", []byte("new")))

	second := b.start(t, b.config(), "second")
	b.waitCommitted(t, 30*time.Second)
	if got := b.countRows(t, "inbox"); got != n+1 {
		t.Errorf("%d rows after redelivery, want %d", got, n+1)
	}
	if got := testutil.ToFloat64(second.c.Metrics.Duplicates); got != n+1 {
		t.Errorf("duplicates = %v, want %d", got, n+1)
	}
	if got := testutil.ToFloat64(second.c.Metrics.RowsInserted); got != 1 {
		t.Errorf("rows inserted by the second run = %v, want 1", got)
	}
}

// An offset commit refused after the batch was written (as during a
// rebalance) is logged and counted; ingest goes on and later commits cover
// the offsets.
func TestOffsetCommitFailureIsLoggedAndIngestContinues(t *testing.T) {
	t.Parallel()
	b := setupKafka(t, 2)
	var refusing atomic.Bool
	refusing.Store(true)
	b.cluster.ControlKey(int16(kmsg.OffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if !refusing.Load() {
			return nil, nil, false // handled normally; the control stays
		}
		b.cluster.KeepControl()
		creq := req.(*kmsg.OffsetCommitRequest)
		resp := creq.ResponseKind().(*kmsg.OffsetCommitResponse)
		for _, rt := range creq.Topics {
			st := kmsg.NewOffsetCommitResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewOffsetCommitResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.RebalanceInProgress.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})

	b.produce(t, b.event(0, "a", "t", []byte("1")), b.event(1, "b", "t", []byte("2")))
	r := b.start(t, b.config(), "c1")
	waitFor(t, 30*time.Second, func() (bool, string) {
		n := testutil.ToFloat64(r.c.Metrics.OffsetCommitErrors)
		return n >= 1 && b.countRows(t, "inbox") == 2, fmt.Sprintf("%v commit errors, %d rows", n, b.countRows(t, "inbox"))
	})
	if got := b.committed(t); got[0] != 0 || got[1] != 0 {
		t.Errorf("committed %v although every commit was refused", got)
	}
	if !r.c.Ready() {
		t.Error("Ready() = false after a failed commit; only failed writes make it false")
	}

	refusing.Store(false)
	b.produce(t, b.event(0, "c", "t", []byte("3")), b.event(1, "d", "t", []byte("4")))
	b.waitCommitted(t, 30*time.Second)
	if got := b.countRows(t, "inbox"); got != 4 {
		t.Errorf("%d rows, want 4", got)
	}
}
