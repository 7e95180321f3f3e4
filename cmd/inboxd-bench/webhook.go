package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/internal/stdwebhooks"
)

// webhookSource is the webhook runs' source: POST /webhooks/bench, and the
// rows' source.
const webhookSource = "bench"

// webhookKey is the key of the webhook runs' signing secret (the daemon's
// secret file holds whsec_<base64 of it>).
var webhookKey = []byte("inboxd-bench-webhook-signing-key")

// WebhookResults is the webhook measurement: signed POSTs into the inbox
// beside the same rows from the Kafka source, and request latency at a
// fraction of the webhook rate. Its rates are "webhook" and "webhook-kafka"
// in Results.Rates.
type WebhookResults struct {
	// Events is the requests (rows) of each throughput run.
	Events int `json:"events"`
	// Concurrency is the requests in flight during the throughput run.
	Concurrency int `json:"concurrency"`
	// PayloadBytes is each body's (and Kafka record's) size.
	PayloadBytes int `json:"payload_bytes"`
	// Retried counts the attempts of the throughput run answered other than
	// 200 (503 over the daemon's cap on concurrent requests), each sent
	// again.
	Retried int `json:"retried"`
	// Ratio is the webhook rate divided by the Kafka source's.
	Ratio float64 `json:"ratio"`
	// Latency is the paced run at a fraction of the webhook rate.
	Latency *WebhookLatency `json:"latency,omitempty"`
}

// WebhookLatency is request latency at a fixed offered rate.
type WebhookLatency struct {
	// Load is the fraction offered of the webhook rate.
	Load float64 `json:"load"`
	// Offered is the offered rate, requests per second.
	Offered float64 `json:"offered"`
	// Sent is the rate achieved.
	Sent float64 `json:"sent"`
	// Events is how many requests were sent.
	Events int `json:"events"`
	// Seconds is how long the sender sent.
	Seconds float64 `json:"seconds"`
	// Non200 counts the requests answered other than 200 (none expected).
	Non200 int `json:"non_200"`
	// Request is the time from a request's scheduled start to its answer
	// (200: the row committed), open loop: a request late to start counts
	// its wait.
	Request Percentiles `json:"request"`
	// CPU is the CPU time of the run: this process (daemon and sender) and
	// the database's backends.
	CPU *CPUUse `json:"cpu,omitempty"`
}

// signedRequest is one prepared webhook request: a body and its Standard
// Webhooks headers.
type signedRequest struct {
	id, timestamp, signature, key string
	body                          []byte
}

// signWebhook signs a request per the Standard Webhooks specification:
// "v1," + base64(HMAC-SHA256(key, id + "." + timestamp + "." + body)).
func signWebhook(key []byte, id, timestamp string, body []byte) string {
	return stdwebhooks.Sign(key, id, timestamp, body)
}

// newSignedRequest prepares the request of event id, signed now (the daemon
// accepts a timestamp up to 5 minutes old).
func newSignedRequest(id string, i int) signedRequest {
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	return signedRequest{id: id, timestamp: ts, signature: signWebhook(webhookKey, id, ts, benchPayload),
		key: "order-" + strconv.Itoa(i), body: benchPayload}
}

// webhookClient posts prepared requests to one daemon's webhook source.
type webhookClient struct {
	url    string
	client *http.Client
}

func newWebhookClient(addr string, conns int) *webhookClient {
	return &webhookClient{url: "http://" + addr + "/webhooks/" + webhookSource, client: &http.Client{
		Timeout:   30 * time.Second,
		Transport: &http.Transport{MaxIdleConns: conns, MaxIdleConnsPerHost: conns, IdleConnTimeout: time.Minute},
	}}
}

// post sends r and returns the answer's status code.
func (c *webhookClient) post(ctx context.Context, r signedRequest) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(r.body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("webhook-id", r.id)
	req.Header.Set("webhook-timestamp", r.timestamp)
	req.Header.Set("webhook-signature", r.signature)
	req.Header.Set("X-Order-Key", r.key)
	resp, err := c.client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// webhookWorld is a database and a daemon whose only source is a
// standard-webhooks source, listening on a port of its own.
type webhookWorld struct {
	db     *database
	pool   *pgxpool.Pool
	done   func()
	daemon *daemon
	client *webhookClient
	dir    string
}

// startWebhookWorld starts the daemon (default settings, the event type
// routed to ignore) and waits until its webhook source answers 200.
func startWebhookWorld(ctx context.Context, env *environment, conns int) (*webhookWorld, error) {
	w := &webhookWorld{}
	ok := false
	defer func() {
		if !ok {
			w.close()
		}
	}()
	var err error
	if w.db, w.pool, w.done, err = env.open(ctx, 0); err != nil {
		return nil, err
	}
	if w.dir, err = os.MkdirTemp("", "inboxd-bench-"); err != nil {
		return nil, err
	}
	routes, err := routesFile(w.dir)
	if err != nil {
		return nil, err
	}
	secretFile := filepath.Join(w.dir, "bench.secret")
	if err := os.WriteFile(secretFile, []byte("whsec_"+base64.StdEncoding.EncodeToString(webhookKey)+"\n"), 0o600); err != nil {
		return nil, err
	}
	sources := filepath.Join(w.dir, "webhooks.yaml")
	if err := os.WriteFile(sources, fmt.Appendf(nil, `sources:
  - name: %s
    verify: standard-webhooks
    secret_file: %s
    event_id: {header: webhook-id}
    event_type: {value: %s}
    key: {header: X-Order-Key}
    unsigned_key: allow     # the bench's key rides in a header the signature does not cover
`, webhookSource, secretFile, eventType), 0o600); err != nil {
		return nil, err
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	w.daemon = startDaemon(ctx, baseDaemonEnv(w.db, routes, "INBOXD_WEBHOOK_ADDR="+addr, "INBOXD_WEBHOOK_SOURCES="+sources))
	w.client = newWebhookClient(addr, conns)
	// Ready when a first request is stored: the listener opens once the
	// daemon has checked the schema.
	deadline := time.Now().Add(time.Minute)
	for i := 0; ; i++ {
		code, err := w.client.post(ctx, newSignedRequest("warm-"+strconv.Itoa(i), i))
		if err == nil && code == http.StatusOK {
			break
		}
		select {
		case c := <-w.daemon.exited():
			return nil, fmt.Errorf("daemon stopped early with exit code %d:\n%s", c, w.daemon.stderr.String())
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("webhook source not answering 200 after a minute (last: %d, %v):\n%s", code, err, w.daemon.stderr.String())
		}
	}
	ok = true
	return w, nil
}

// close stops the daemon and drops the database; it may be called more
// than once.
func (w *webhookWorld) close() error {
	var err error
	if w.daemon != nil {
		err = w.daemon.stop()
		w.daemon = nil
	}
	if w.done != nil {
		w.done()
		w.done = nil
	}
	if w.dir != "" {
		os.RemoveAll(w.dir)
		w.dir = ""
	}
	return err
}

// rows counts the rows of the webhook source whose event id starts with
// prefix.
func (w *webhookWorld) rows(ctx context.Context, prefix string) (stored, processed int, err error) {
	err = w.pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE status = 'processed')
		FROM inbox WHERE source = $1 AND starts_with(event_id, $2)`, webhookSource, prefix).Scan(&stored, &processed)
	return stored, processed, err
}

// freeAddr is a loopback host:port that was free a moment ago.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// benchWebhook measures the webhook source: n requests prepared and
// signed beforehand, posted by conns senders at once to a warm daemon,
// timed from the first request to the last 200 (a 200 is answered once the
// row has committed, so then every row is stored); every other answer is
// retried and counted. Then, on the same daemon, latencyFor of requests
// at load × that rate (0: none).
func benchWebhook(ctx context.Context, env *environment, n, conns int, load float64, latencyFor time.Duration, logf func(string, ...any)) (Rate, *WebhookResults, error) {
	w, err := startWebhookWorld(ctx, env, conns)
	if err != nil {
		return Rate{}, nil, err
	}
	defer w.close()
	reqs := make([]signedRequest, n)
	for i := range reqs {
		reqs[i] = newSignedRequest("ev-"+strconv.Itoa(i), i)
	}
	meter, err := startCPUMeter(ctx, w.pool, w.db)
	if err != nil {
		return Rate{}, nil, err
	}
	var next, retried atomic.Int64
	var firstErr error
	var errOnce sync.Once
	var wg sync.WaitGroup
	start := time.Now()
	for range conns {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				for attempt := 0; ; attempt++ {
					code, err := w.client.post(ctx, reqs[i])
					if err == nil && code == http.StatusOK {
						break
					}
					retried.Add(1)
					if attempt == 100 || ctx.Err() != nil {
						errOnce.Do(func() {
							firstErr = fmt.Errorf("request %s: %d answers other than 200 (last %d, %v)", reqs[i].id, attempt+1, code, err)
						})
						return
					}
					time.Sleep(5 * time.Millisecond)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return Rate{}, nil, fmt.Errorf("%w:\n%s", firstErr, w.daemon.stderr.String())
	}
	cpu, err := meter.stop(ctx)
	if err != nil {
		return Rate{}, nil, err
	}
	if stored, _, err := w.rows(ctx, "ev-"); err != nil {
		return Rate{}, nil, err
	} else if stored != n {
		return Rate{}, nil, fmt.Errorf("%d rows stored after %d requests answered 200", stored, n)
	}
	r := newRate("webhook", fmt.Sprintf("inboxd webhook source (%d senders) → stored", conns), n, elapsed)
	r.CPU = cpu
	res := &WebhookResults{Events: n, Concurrency: conns, PayloadBytes: len(benchPayload), Retried: int(retried.Load())}
	logf("  webhook   %9.0f requests/s  (%d requests, %d senders, in %.2fs; %d retried%s)", r.PerSecond, n, conns, r.Seconds, res.Retried, r.note())
	if latencyFor > 0 {
		// Let the workers process the backlog first: the paced run should
		// not share the machine with it.
		if err := waitAllProcessed(ctx, w, "ev-", n); err != nil {
			return Rate{}, nil, err
		}
		lat, err := webhookLatency(ctx, w, load, load*r.PerSecond, latencyFor)
		if err != nil {
			return Rate{}, nil, fmt.Errorf("latency: %w", err)
		}
		res.Latency = lat
		logf("  at %.0f%% load: offered %.0f/s, sent %.0f/s, %d requests; request p50 %.1f p95 %.1f p99 %.1f max %.1f ms; CPU cores: process %.2f, PostgreSQL backends %.2f",
			load*100, lat.Offered, lat.Sent, lat.Events, lat.Request.P50MS, lat.Request.P95MS, lat.Request.P99MS, lat.Request.MaxMS,
			lat.CPU.Process/lat.CPU.Wall, lat.CPU.Postgres/lat.CPU.Wall)
	}
	if err := w.close(); err != nil {
		return Rate{}, nil, err
	}
	return r, res, nil
}

// waitAllProcessed waits until the n rows of prefix are processed.
func waitAllProcessed(ctx context.Context, w *webhookWorld, prefix string, n int) error {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		_, processed, err := w.rows(ctx, prefix)
		if err != nil {
			return err
		}
		if processed == n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d rows processed after 5 minutes", processed, n)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// webhookLatency offers rate requests per second for d, open loop: request
// i is due at i/rate from the start and sent then by a goroutine of its
// own, whatever the answers before it; its latency runs from when it was
// due to its answer.
func webhookLatency(ctx context.Context, w *webhookWorld, load, rate float64, d time.Duration) (*WebhookLatency, error) {
	if rate <= 0 {
		return nil, errors.New("no rate to offer a fraction of")
	}
	total := int(rate * d.Seconds())
	reqs := make([]signedRequest, total)
	for i := range reqs {
		reqs[i] = newSignedRequest("lat-"+strconv.Itoa(i), i)
	}
	lat := make([]float64, total)
	var non200 atomic.Int64
	var wg sync.WaitGroup
	meter, err := startCPUMeter(ctx, w.pool, w.db)
	if err != nil {
		return nil, err
	}
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	start := time.Now()
	sent := 0
	for sent < total {
		due := min(int(rate*time.Since(start).Seconds())+1, total)
		for ; sent < due; sent++ {
			i := sent
			at := start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
			wg.Go(func() {
				code, err := w.client.post(ctx, reqs[i])
				lat[i] = float64(time.Since(at)) / float64(time.Millisecond)
				if err != nil || code != http.StatusOK {
					non200.Add(1)
				}
			})
		}
		select {
		case <-ctx.Done():
			wg.Wait()
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
	took := time.Since(start)
	wg.Wait()
	cpu, err := meter.stop(ctx)
	if err != nil {
		return nil, err
	}
	if stored, _, err := w.rows(ctx, "lat-"); err != nil {
		return nil, err
	} else if int64(stored) != int64(total)-non200.Load() {
		return nil, fmt.Errorf("%d rows stored after %d requests answered 200", stored, int64(total)-non200.Load())
	}
	maxMS := 0.0
	for _, v := range lat {
		maxMS = max(maxMS, v)
	}
	return &WebhookLatency{Load: load, Offered: rate, Sent: float64(total) / took.Seconds(), Events: total, Seconds: took.Seconds(),
		Non200: int(non200.Load()), CPU: cpu,
		Request: Percentiles{P50MS: percentile(lat, 0.5), P95MS: percentile(lat, 0.95), P99MS: percentile(lat, 0.99), MaxMS: maxMS}}, nil
}

// benchKafkaStored measures the same rows from the Kafka source, as far as
// the inbox only: n records with the webhook bodies produced to the topic
// beforehand, then the daemon (the same settings) started, timed until
// every row is stored; the time from app.Main to the first stored row
// (pool, schema check, consumer group join) is left out, as the webhook run
// starts on a warm daemon.
func benchKafkaStored(ctx context.Context, env *environment, n int) (Rate, error) {
	db, pool, done, err := env.open(ctx, 0)
	if err != nil {
		return Rate{}, err
	}
	defer done()
	k, lastIDs, routes, cleanup, err := filledKafka(ctx, n)
	if err != nil {
		return Rate{}, err
	}
	defer cleanup()
	meter, err := startCPUMeter(ctx, pool, db)
	if err != nil {
		return Rate{}, err
	}
	start := time.Now()
	d := startDaemon(ctx, daemonEnv(db, k, routes))
	werr := waitStored(ctx, pool, topic, lastIDs, d.exited(), d.stderr.String)
	stored := time.Now()
	var cpu *CPUUse
	if werr == nil {
		cpu, werr = meter.stop(ctx)
	}
	if serr := d.stop(); werr == nil {
		werr = serr
	}
	if werr != nil {
		return Rate{}, werr
	}
	var rows int
	var first time.Time
	if err := pool.QueryRow(ctx, `SELECT count(*), min(received_at) FROM inbox WHERE source = $1`, topic).Scan(&rows, &first); err != nil {
		return Rate{}, err
	}
	if rows != n {
		return Rate{}, fmt.Errorf("%d rows of %s, want %d", rows, topic, n)
	}
	startup := first.Sub(start)
	r := newRate("webhook-kafka", "inboxd Kafka source, the same rows → stored", n, stored.Sub(first))
	r.StartupSeconds = startup.Seconds()
	r.CPU = cpu
	return r, nil
}

// waitStored waits until the rows of lastIDs (of source) are in the inbox:
// ingest writes each partition in offset order, so then all are.
func waitStored(ctx context.Context, pool *pgxpool.Pool, source string, lastIDs []string, exited <-chan int, logs func() string) error {
	return pollDaemon(ctx, exited, logs, 10*time.Millisecond, 10*time.Minute, func() (bool, error) {
		var present int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM inbox WHERE source = $1 AND event_id = ANY($2)`, source, lastIDs).Scan(&present)
		return present == len(lastIDs), err
	}, func() error { return fmt.Errorf("rows not stored after 10 minutes:\n%s", logs()) })
}

// benchWebhookRuns runs the Kafka source's run, then the webhook run and
// its latency run; the rates are webhook-kafka and webhook.
func benchWebhookRuns(ctx context.Context, env *environment, n, conns int, load float64, latencyFor time.Duration, logf func(string, ...any)) ([]Rate, *WebhookResults, error) {
	kr, err := benchKafkaStored(ctx, env, n)
	if err != nil {
		return nil, nil, fmt.Errorf("kafka: %w", err)
	}
	logf("  %-21s %9.0f events/s  (%d events in %.2fs%s)", kr.Name, kr.PerSecond, kr.Events, kr.Seconds, kr.note())
	wr, res, err := benchWebhook(ctx, env, n, conns, load, latencyFor, logf)
	if err != nil {
		return nil, nil, err
	}
	res.Ratio = wr.PerSecond / kr.PerSecond
	return []Rate{kr, wr}, res, nil
}
