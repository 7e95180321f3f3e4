package app

import (
	"strings"
	"testing"

	"github.com/inboxd/inboxd/config"
)

// The NATS variables reach the NATS source's configuration, with the
// batching and mapping settings every source shares; without
// INBOXD_NATS_URL there is no NATS source.
func TestNATSConfigFromEnvironment(t *testing.T) {
	t.Parallel()
	c, err := config.Load([]string{
		"INBOXD_DATABASE_URL=postgres://u:pw@db/inbox",
		"INBOXD_NATS_URL=tls://n1:4222,tls://n2:4222",
		"INBOXD_NATS_STREAMS=ORDERS,AUDIT",
		"INBOXD_NATS_CONSUMER=billing",
		"INBOXD_NATS_SUBJECTS=orders.eu.>",
		"INBOXD_NATS_CREDS_FILE=/etc/nats/u.creds",
		"INBOXD_NATS_TLS_CA_FILE=/etc/nats/ca.pem",
		"INBOXD_INGEST_BATCH_SIZE=200",
		"INBOXD_MAX_PAYLOAD=2048",
	})
	if err != nil {
		t.Fatal(err)
	}
	n := natsConfig(c)
	if n == nil || n.URL != "tls://n1:4222,tls://n2:4222" || strings.Join(n.Streams, ",") != "ORDERS,AUDIT" ||
		n.Consumer != "billing" || strings.Join(n.Subjects, ",") != "orders.eu.>" || n.CredsFile != "/etc/nats/u.creds" ||
		n.TLS.CAFile != "/etc/nats/ca.pem" || n.Pipeline.BatchSize != 200 || n.Pipeline.Mapping.MaxPayload != 2048 {
		t.Errorf("natsConfig = %+v", n)
	}
	c.NATSURL = ""
	if n := natsConfig(c); n != nil {
		t.Errorf("natsConfig without INBOXD_NATS_URL = %+v, want nil", n)
	}
}
