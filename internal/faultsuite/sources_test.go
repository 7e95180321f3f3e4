package faultsuite

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/pgtest"
)

// The RabbitMQ and NATS JetStream scenarios run the real daemon against
// the real servers (RabbitMQ 127.0.0.1:5672, NATS 127.0.0.1:4222; a
// missing server skips them, or fails them under CI=true). Each uses a
// queue or stream of its own, deleted at the end, and a mixed stream:
// every tenth event published twice, an unknown type now and then (no
// route: it ends dead), and malformed messages (oversize; for RabbitMQ
// also without an id) that must each be one rejected row.

// brokerEventType is the routed type of the broker scenarios.
const brokerEventType = "order.created"

// brokerStream is the mixed stream of the broker scenarios.
func brokerStream(b Broker, n, rate int) BrokerStream {
	return BrokerStream{N: n, Prefix: "e-", Type: brokerEventType, UnknownType: "no.such.route", UnknownEvery: 97,
		MalformedEvery: 100, MissingID: b.Kind() == "amqp", Oversize: 2000, Rate: rate, Batch: 25}
}

// brokerRun is one broker scenario's database, sink, history and daemon
// configuration.
type brokerRun struct {
	t       *testing.T
	b       Broker
	db      *pgtest.DB
	sink    *Sink
	run     *Run
	lease   time.Duration
	workers int
	env     []string
}

// newBrokerRun sets up a scenario whose daemons reach b at addr.
func newBrokerRun(t *testing.T, b Broker, addr string, workers int) *brokerRun {
	db := sharedDB(t)
	sink := NewSink(t)
	lease := 2 * time.Second
	run := NewRun(t, db.Pool, sink, lease)
	run.Ledger.RateSpan = 500 * time.Millisecond
	run.OnFailure(func() string { _, d := b.Pending(); return d })
	routes := writeRoutes(t, httpRoute(sink, brokerEventType))
	env := append(baseEnv(db.URL, lease, workers, "INBOXD_ROUTES="+routes, "INBOXD_MAX_PAYLOAD=1024"), b.DaemonEnv(addr)...)
	return &brokerRun{t: t, b: b, db: db, sink: sink, run: run, lease: lease, workers: workers, env: env}
}

func (r *brokerRun) start(name string) *Daemon {
	return StartDaemon(r.t, DaemonSpec{Name: name, Binary: bins.Inboxd, Env: r.env})
}

func (r *brokerRun) processed() int {
	var c int
	_ = r.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM inbox WHERE status = 'processed'`).Scan(&c)
	return c
}

// finish waits for the stream and checks the history: every confirmed
// event processed once (lost, duplicates against the ledger's bound), the
// sink got each, every malformed message one rejected row, every
// unknown-type event one dead row, no other row, and the broker holding
// nothing pending or unacknowledged (checked while d runs and again after
// it stopped, by stop).
func (r *brokerRun) finish(prod *BrokerProduction, d *Daemon, recovered time.Time) {
	t := r.t
	CheckLeasesRecovered(t, r.db.Pool, recovered, r.lease)
	prod.Wait(t, scale(120*time.Second))
	if err := prod.Err(); err != nil {
		t.Fatalf("publisher: %v", err)
	}
	src := r.b.Source()
	acked, unknown, malformed := prod.Acked(), prod.Unknown(), prod.Malformed()
	r.run.Expect(src, acked...)
	r.run.WaitProcessed(scale(60 * time.Second))
	r.run.Check()
	for _, id := range acked {
		if r.sink.Deliveries(src+"/"+id) == 0 {
			t.Errorf("NOT DELIVERED: %s/%s is processed but the sink never answered it", src, id)
			break
		}
	}
	WaitFor(t, scale(60*time.Second), "every unknown-type event final", func() bool {
		_, final, err := CountSettled(context.Background(), r.db.Pool, src, unknown)
		return err == nil && final == len(unknown)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var rows, rejected, dead int
	if err := r.db.Pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE status = 'rejected'),
		count(*) FILTER (WHERE status = 'dead' AND event_id = ANY($2)) FROM inbox WHERE source = $1`,
		src, unknown).Scan(&rows, &rejected, &dead); err != nil {
		t.Fatal(err)
	}
	if rejected != malformed {
		t.Errorf("REJECTED: %d rejected rows, want %d (one per malformed message)", rejected, malformed)
	}
	if dead != len(unknown) {
		t.Errorf("UNKNOWN TYPE: %d of %d unknown-type events dead", dead, len(unknown))
	}
	if want := len(acked) + len(unknown) + malformed; rows != want {
		t.Errorf("ROWS: the inbox holds %d rows of %s, want %d (%d events, %d unknown-type, %d malformed): a message stored twice or not at all",
			rows, src, want, len(acked), len(unknown), malformed)
	}
	WaitBrokerDrained(t, r.b, 30*time.Second)
	r.run.Note("source=%s rejected=%d unknown_dead=%d", r.b.Kind(), rejected, dead)
}

// stop stops d with SIGTERM and checks again that the broker holds
// nothing: RabbitMQ counts the deliveries a consumer held unacknowledged
// only once they are back in the queue.
func (r *brokerRun) stop(d *Daemon) {
	if exited, _, code := d.Terminate(30 * time.Second); !exited || code != 0 {
		r.t.Errorf("SIGTERM: exited %v, code %d", exited, code)
	}
	WaitBrokerDrained(r.t, r.b, 10*time.Second)
}

// brokerStorm: a stream published while the daemon is SIGKILLed and
// restarted, at evenly spaced points of what it processed.
func brokerStorm(t *testing.T, b Broker) {
	r := newBrokerRun(t, b, b.Upstream(), 2)
	n, kills := pick(3000, 30000), pick(3, 12)
	d := r.start("gen-0")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	prod := PublishStream(ctx, b, brokerStream(b, n, pick(250, 1000)))
	var recovered time.Time
	midStream := 0
	for k := range kills {
		target := (k + 1) * brokerRouted(n) / (kills + 2)
		WaitFor(t, scale(60*time.Second), fmt.Sprintf("%d rows processed before kill %d", target, k+1),
			func() bool { return r.processed() >= target })
		WaitFor(t, scale(60*time.Second), fmt.Sprintf("%s processing before kill %d", d.Name, k+1), func() bool {
			m, err := d.Metrics()
			return err == nil && m.Value("inboxd_worker_completed_total", "outcome", "processed") >= 50
		})
		f := r.run.Ledger.Observe(r.workers, d)
		if prod.Published() < n {
			midStream++
		}
		d.Kill()
		r.run.Ledger.Record("SIGKILL", f)
		d = r.start(fmt.Sprintf("gen-%d", k+1))
		recovered = time.Now()
	}
	if midStream == 0 {
		t.Errorf("every kill came after the last publication: no kill mid-stream")
	}
	r.run.Note("kills_while_publishing=%d", midStream)
	r.finish(prod, d, recovered)
	r.stop(d)
}

// brokerRouted is roughly how many of n events are routed (the others have
// the unknown type): the progress the faults are spaced on.
func brokerRouted(n int) int { return n - n/97 }

// brokerCuts: the daemon reaches the broker through the proxy; its
// connection is cut several times mid-stream (refused until restored,
// /readyz not ready meanwhile and ready again after), dropped once (new
// connections accepted at once) and black-holed once while inserts are
// slowed (PostgreSQL through a proxy with latency): the acknowledgements
// of the batches committed meanwhile are lost, and their redeliveries
// must be absorbed.
func brokerCuts(t *testing.T, b Broker) {
	proxy := NewProxy(t, b.Upstream())
	r := newBrokerRun(t, b, proxy.Addr(), 4)
	// The daemon reaches PostgreSQL through a proxy too: latency added
	// there makes a batch's insert outlast the start of the black hole.
	u, err := url.Parse(r.db.URL)
	if err != nil {
		t.Fatal(err)
	}
	dbProxy := NewProxy(t, u.Host)
	for i, kv := range r.env {
		if strings.HasPrefix(kv, "INBOXD_DATABASE_URL=") {
			r.env[i] = "INBOXD_DATABASE_URL=" + dbProxy.URL(r.db.URL)
		}
	}
	n := pick(3000, 30000)
	// The black hole comes early, while the publisher surely still runs.
	faults := []string{"cut", "black hole", "cut", "drop", "cut"}
	if long {
		for range 7 {
			faults = append(faults, "cut")
		}
	}
	d := r.start("a")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	prod := PublishStream(ctx, b, brokerStream(b, n, pick(250, 1000)))
	ready := func() bool { code, err := d.Readyz(2 * time.Second); return err == nil && code == http.StatusOK }
	reconnects := func() float64 {
		m, err := d.Metrics()
		if err != nil {
			return -1
		}
		return m.Value("inboxd_ingest_reconnects_total", "source_kind", b.Kind())
	}
	// reconnected waits until the daemon has opened its broker connection
	// again after a fault, and is ready.
	reconnected := func(before float64, what string) {
		WaitFor(t, 60*time.Second, "reconnected and ready after "+what, func() bool { return reconnects() > before && ready() })
	}
	var recovered time.Time
	var notReady []string
	step := brokerRouted(n) / (len(faults) + 2)
	midStream, cuts, storedInHole := 0, 0, -1
	for k, fault := range faults {
		target := (k + 1) * step
		WaitFor(t, scale(60*time.Second), fmt.Sprintf("%d rows processed before fault %d (%s)", target, k+1, fault),
			func() bool { return r.processed() >= target })
		publishing := prod.Published() < n
		if publishing {
			midStream++
		}
		f := r.run.Ledger.Observe(r.workers, d)
		r0 := reconnects()
		at := time.Now()
		switch fault {
		case "cut":
			cuts++
			proxy.Cut()
			r.run.Ledger.Record("broker cut", f)
			WaitFor(t, 30*time.Second, fmt.Sprintf("/readyz not ready after cut %d", cuts), func() bool { return !ready() })
			notReadyAfter := time.Since(at)
			time.Sleep(time.Second) // stay cut off a while, the publisher going on
			proxy.Restore()
			reconnected(r0, fmt.Sprintf("cut %d", cuts))
			notReady = append(notReady, fmt.Sprintf("%.1fs/%.1fs", notReadyAfter.Seconds(), time.Since(at).Seconds()))
		case "drop":
			proxy.CutAll()
			r.run.Ledger.Record("broker drop", f)
			reconnected(r0, "the drop")
		case "black hole":
			if !publishing {
				t.Errorf("the black hole came after the last publication: nothing flowed into it")
			}
			// PostgreSQL's answers reach the daemon 500 ms late from now
			// on, and the broker's connection is black-holed 400 ms later
			// (four bursts of the publisher in between): a row committed
			// from now on is confirmed to the daemon only inside the hole,
			// so the acknowledgement of its message goes into the hole
			// (rows committed in the hole's first 1.5 s are counted; their
			// confirmations arrive before it ends). The broker delivers
			// those messages again once the connection is closed
			// (RabbitMQ) or their AckWait passes (NATS).
			before := r.rows()
			dbProxy.AddLatency(500 * time.Millisecond)
			time.Sleep(400 * time.Millisecond)
			proxy.BlackHole()
			r.run.Ledger.Record("broker black hole", f)
			time.Sleep(1500 * time.Millisecond)
			storedInHole = r.rows() - before
			time.Sleep(500 * time.Millisecond)
			dbProxy.Restore()
			proxy.Restore()
			reconnected(r0, "the black hole")
		}
		recovered = time.Now()
	}
	if midStream == 0 {
		t.Errorf("every fault came after the last publication: none mid-stream")
	}

	r.finish(prod, d, recovered)
	m, err := d.Metrics()
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	reconnectsTotal := m.Value("inboxd_ingest_reconnects_total", "source_kind", b.Kind())
	if reconnectsTotal < float64(len(faults)) {
		t.Errorf("RECONNECTS: inboxd_ingest_reconnects_total{source_kind=%q} = %.0f after %d faults", b.Kind(), reconnectsTotal, len(faults))
	}
	// Duplicates beyond the stream's own (every tenth event published
	// twice, all confirmed) are redeliveries, absorbed by the inbox (finish
	// found no row twice).
	redelivered := m.Value("inboxd_ingest_duplicates_total", "source_kind", b.Kind()) - float64((n+9)/10)
	switch {
	case storedInHole == 0:
		t.Errorf("BLACK HOLE: no row was committed with its acknowledgement bound for the hole: the fault missed the insert-to-ack window")
	case redelivered <= 0:
		t.Errorf("REDELIVERY: %d rows were committed with their acknowledgements bound for the black hole, but no redelivery reached the inbox", storedInHole)
	}
	r.run.Note("faults_while_publishing=%d reconnects=%.0f not_ready_after/ready_again_after=%v acks_into_black_hole=%d redeliveries_absorbed=%.0f",
		midStream, reconnectsTotal, notReady, storedInHole, redelivered)
	r.stop(d)
}

// rows is the number of rows in the inbox.
func (r *brokerRun) rows() int {
	var c int
	_ = r.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM inbox`).Scan(&c)
	return c
}

// Scenario: RabbitMQ, 3 × SIGKILL + restart while the stream is published.
func TestRabbitMQSIGKILLStorm(t *testing.T) {
	scenario(t, heavy)
	brokerStorm(t, NewRabbitMQ(t))
}

// Scenario: NATS JetStream, 3 × SIGKILL + restart while the stream is
// published (the durable consumer's AckWait 2 s: what a killed daemon held
// comes back soon).
func TestNATSSIGKILLStorm(t *testing.T) {
	scenario(t, heavy)
	brokerStorm(t, NewNATS(t, 2*time.Second))
}

// Scenario: RabbitMQ through the proxy, 3 cuts, a drop and a black hole.
func TestRabbitMQConnectionCut(t *testing.T) {
	scenario(t, heavy)
	brokerCuts(t, NewRabbitMQ(t))
}

// Scenario: NATS JetStream through the proxy, 3 cuts, a drop and a black
// hole.
func TestNATSConnectionCut(t *testing.T) {
	scenario(t, heavy)
	brokerCuts(t, NewNATS(t, 2*time.Second))
}
