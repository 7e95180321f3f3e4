package amqppub

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/outbox"
	"github.com/inboxd/inboxd/internal/outbox/publishers/pubtest"
	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/testkit"
)

// The relay's messages as the most used third-party RabbitMQ client,
// amqplib, reads them (internal/interop).

// amqplib reads the standard properties of the relay's RabbitMQ messages
// from the row's headers of their names (content-type, content-encoding,
// correlation-id, reply-to, expiration, timestamp) as the properties
// (properties.contentType, …), not as entries of the headers table; the
// event id and type as message_id and type; the rest, the key among them,
// in the headers table.
func TestAmqplibReadsTheRelaysProperties(t *testing.T) {
	t.Parallel()
	node := testkit.NodeInterop(t)
	db := pgtest.New(t)
	ab := setupAMQPPub(t)
	props := map[string]string{
		"content-type": "application/json", "content-encoding": "identity", "correlation-id": "corr-7",
		"reply-to": "replies", "expiration": "600000", "timestamp": "2024-05-01T10:00:00Z",
	}
	hs := map[string]string{"tenant": "acme"}
	for k, v := range props {
		hs[k] = v
	}
	rows := []pubtest.InteropRow{
		{EventID: "with-props", Key: "order-1", Headers: hs, Payload: []byte(`{"id":1}`)},
		{EventID: "without", Key: "order-1", Headers: map[string]string{"tenant": "acme"}, Payload: []byte{0, 0xff}},
	}
	pubtest.WriteRows(t, db, "amqp:"+ab.exchange+"/rk", rows)
	ap := newAMQPPub(t, Config{})
	pubtest.StartRelay(t, db, pubtest.RelayConfig(), map[string]outbox.Publisher{outbox.KindAMQP: ap})
	testkit.WaitFor(t, 20*time.Second, "both rows published", func() bool { return pubtest.Count(t, db, "status = 'published'") == 2 })

	out := node.Run(t, 60*time.Second, "amqp_outbox_properties.js",
		[]string{"AMQP_URL=" + testkit.AMQPURL(), "QUEUE=" + ab.queue, "COUNT=2"})
	type message struct {
		Properties struct {
			ContentType     *string        `json:"contentType"`
			ContentEncoding *string        `json:"contentEncoding"`
			CorrelationID   *string        `json:"correlationId"`
			ReplyTo         *string        `json:"replyTo"`
			Expiration      *string        `json:"expiration"`
			Timestamp       *int64         `json:"timestamp"`
			MessageID       string         `json:"messageId"`
			Type            string         `json:"type"`
			DeliveryMode    int            `json:"deliveryMode"`
			Headers         map[string]any `json:"headers"`
		} `json:"properties"`
		Body string `json:"body"`
	}
	var got []message
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var m message
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("amqplib printed %q: %v", line, err)
		}
		got = append(got, m)
	}
	if len(got) != 2 || got[0].Properties.MessageID != "with-props" || got[1].Properties.MessageID != "without" {
		t.Fatalf("read %+v, want with-props then without", got)
	}
	p := got[0].Properties
	str := func(s *string) string {
		if s == nil {
			return "<unset>"
		}
		return *s
	}
	for name, v := range map[string]string{"contentType": str(p.ContentType), "contentEncoding": str(p.ContentEncoding),
		"correlationId": str(p.CorrelationID), "replyTo": str(p.ReplyTo), "expiration": str(p.Expiration)} {
		if want := map[string]string{"contentType": "application/json", "contentEncoding": "identity", "correlationId": "corr-7",
			"replyTo": "replies", "expiration": "600000"}[name]; v != want {
			t.Errorf("properties.%s = %q, want %q", name, v, want)
		}
	}
	if p.Timestamp == nil || *p.Timestamp != time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC).Unix() {
		t.Errorf("properties.timestamp = %v, want 2024-05-01T10:00:00Z in seconds", p.Timestamp)
	}
	if p.Type != "order.shipped" || p.DeliveryMode != 2 {
		t.Errorf("type %q, delivery mode %d", p.Type, p.DeliveryMode)
	}
	for k := range props {
		if _, ok := p.Headers[k]; ok {
			t.Errorf("header %s is in the headers table too: %v", k, p.Headers)
		}
	}
	for k, v := range map[string]string{"tenant": "acme", outbox.EventIDHeader: "with-props", outbox.EventTypeHeader: "order.shipped", outbox.KeyHeader: "order-1"} {
		if p.Headers[k] != v {
			t.Errorf("headers table %s = %v, want %q", k, p.Headers[k], v)
		}
	}
	q := got[1].Properties
	if q.ContentType != nil || q.Timestamp != nil || q.Expiration != nil {
		t.Errorf("a row without those headers: content type %v, timestamp %v, expiration %v; want none set", q.ContentType, q.Timestamp, q.Expiration)
	}
	if body, _ := base64.StdEncoding.DecodeString(got[1].Body); !bytes.Equal(body, []byte{0, 0xff}) {
		t.Errorf("body %q", body)
	}
}
