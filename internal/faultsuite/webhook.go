package faultsuite

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/stdwebhooks"
)

// WebhookSecret is a Standard Webhooks signing secret: the raw key and its
// whsec_<base64> form, as the daemon's secret_file holds it.
type WebhookSecret struct {
	// Key is the HMAC-SHA256 key.
	Key []byte
	// Encoded is "whsec_" + base64(Key).
	Encoded string
}

// NewWebhookSecret returns a random 24-byte secret.
func NewWebhookSecret(t testing.TB) WebhookSecret {
	t.Helper()
	key := make([]byte, 24)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	return WebhookSecret{Key: key, Encoded: "whsec_" + base64.StdEncoding.EncodeToString(key)}
}

// Sign returns the webhook-signature value of a Standard Webhooks request:
// "v1," + base64(HMAC-SHA256(key, id + "." + timestamp + "." + body)).
func (s WebhookSecret) Sign(id, timestamp string, body []byte) string {
	return stdwebhooks.Sign(s.Key, id, timestamp, body)
}

// writeWebhookSources writes the daemon's INBOXD_WEBHOOK_SOURCES file with
// one standard-webhooks source, name, whose secret file holds secret; the
// event id is the webhook-id header, the type the body's "type" field. It
// returns the file's path.
func writeWebhookSources(t testing.TB, name string, secret WebhookSecret) string {
	t.Helper()
	dir := t.TempDir()
	secretFile := filepath.Join(dir, name+".secret")
	if err := os.WriteFile(secretFile, []byte(secret.Encoded+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	body := fmt.Sprintf(`sources:
  - name: %s
    verify: standard-webhooks
    secret_file: %s
    event_id: {header: webhook-id}
    event_type: {json: type}
`, name, secretFile)
	path := filepath.Join(dir, "webhooks.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// WebhookDelivery is one event a WebhookSender delivers: its id, type and
// body. Duplicate deliveries of an event carry the same id.
type WebhookDelivery struct {
	ID   string
	Type string
	Body []byte
}

// WebhookSender is a webhook sender as payment providers run them: it POSTs
// each delivery, signed per the Standard Webhooks specification (signed
// afresh, with a new timestamp, on every attempt), and retries it until it
// gets a 2xx, after any other answer or a connection error, with a short
// pause between attempts. Concurrency deliveries are in flight at once.
type WebhookSender struct {
	// URL is the endpoint, http://host:port/webhooks/<source>.
	URL string
	// Secret signs the requests.
	Secret WebhookSecret
	// Concurrency is the number of deliveries in flight (default 16).
	Concurrency int
	// Rate paces the start of deliveries, per second (0: no pacing).
	Rate int
	// Retry is the pause after a failed attempt (default 20 ms).
	Retry time.Duration

	client *http.Client
	done   chan struct{}

	mu        sync.Mutex
	acked     map[string]time.Time // first 2xx per event id
	started   int                  // deliveries started
	attempts  int
	delivered int            // deliveries answered 2xx (duplicates included)
	failures  map[string]int // failed attempts by cause: a status code or "conn"
	errSample string         // one connection error, for the log
	unexpect  []string       // answers the sender should never get (4xx)
}

// Send delivers ds in the background (in order of start, Concurrency at a
// time) and returns at once; Wait waits for the end.
func (s *WebhookSender) Send(ctx context.Context, ds []WebhookDelivery) {
	if s.Concurrency <= 0 {
		s.Concurrency = 16
	}
	if s.Retry <= 0 {
		s.Retry = 20 * time.Millisecond
	}
	s.acked, s.failures, s.done = map[string]time.Time{}, map[string]int{}, make(chan struct{})
	// The request timeout outlasts the daemon's bounded wait for a commit
	// (INBOXD_WEBHOOK_WRITE_TIMEOUT, 10 s by default): a request is given
	// up only when the daemon is gone or stuck.
	s.client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		MaxIdleConnsPerHost: s.Concurrency, MaxConnsPerHost: s.Concurrency, IdleConnTimeout: 30 * time.Second,
	}}
	jobs := make(chan WebhookDelivery)
	var wg sync.WaitGroup
	for range s.Concurrency {
		wg.Go(func() {
			for d := range jobs {
				s.deliver(ctx, d)
			}
		})
	}
	go func() {
		defer close(s.done)
		defer wg.Wait()
		defer close(jobs)
		pace := newPacer(s.Rate, 1)
		for _, d := range ds {
			if !pace.wait(ctx) {
				return
			}
			select {
			case <-ctx.Done():
				return
			case jobs <- d:
				s.mu.Lock()
				s.started++
				s.mu.Unlock()
			}
		}
	}()
}

// deliver sends d until it is answered 2xx or ctx ends.
func (s *WebhookSender) deliver(ctx context.Context, d WebhookDelivery) {
	for ctx.Err() == nil {
		code, err := s.attempt(ctx, d)
		now := time.Now()
		s.mu.Lock()
		s.attempts++
		switch {
		case err == nil && code/100 == 2:
			s.delivered++
			if _, ok := s.acked[d.ID]; !ok {
				s.acked[d.ID] = now
			}
			s.mu.Unlock()
			return
		case err != nil:
			s.failures["conn"]++
			if s.errSample == "" {
				s.errSample = err.Error()
			}
		default:
			s.failures[strconv.Itoa(code)]++
			if code/100 == 4 && len(s.unexpect) < 10 {
				s.unexpect = append(s.unexpect, fmt.Sprintf("%s: %d", d.ID, code))
			}
		}
		s.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(s.Retry):
		}
	}
}

// attempt is one signed POST of d; it returns the answer's status code.
func (s *WebhookSender) attempt(ctx context.Context, d WebhookDelivery) (int, error) {
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL, bytes.NewReader(d.Body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("webhook-id", d.ID)
	req.Header.Set("webhook-timestamp", ts)
	req.Header.Set("webhook-signature", s.Secret.Sign(d.ID, ts, d.Body))
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// Done is closed when every delivery was answered 2xx (or the context
// ended).
func (s *WebhookSender) Done() <-chan struct{} { return s.done }

// Wait waits for Done, failing t after timeout.
func (s *WebhookSender) Wait(t testing.TB, timeout time.Duration) {
	t.Helper()
	select {
	case <-s.done:
	case <-time.After(timeout):
		t.Fatalf("webhook sender not done after %s: %s", timeout, s.Describe())
	}
}

// Acked returns the event ids answered 2xx so far, sorted.
func (s *WebhookSender) Acked() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, 0, len(s.acked))
	for id := range s.acked {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// AckedCount is the number of event ids answered 2xx so far.
func (s *WebhookSender) AckedCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.acked)
}

// Started is the number of deliveries started so far.
func (s *WebhookSender) Started() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.started
}

// Stats returns the attempts made, the deliveries answered 2xx (duplicates
// included) and the failed attempts by cause (a status code, or "conn").
func (s *WebhookSender) Stats() (attempts, delivered int, failures map[string]int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	failures = make(map[string]int, len(s.failures))
	for k, v := range s.failures {
		failures[k] = v
	}
	return s.attempts, s.delivered, failures
}

// Unexpected lists a few 4xx answers: a correctly signed request is never
// refused, whatever the daemon's state.
func (s *WebhookSender) Unexpected() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.unexpect...)
}

// Describe summarises the sender's progress, for failure messages.
func (s *WebhookSender) Describe() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var fs []string
	for k, v := range s.failures {
		fs = append(fs, fmt.Sprintf("%s×%d", k, v))
	}
	sort.Strings(fs)
	return fmt.Sprintf("started %d, event ids answered 2xx %d, attempts %d, failed attempts [%s], a connection error: %q",
		s.started, len(s.acked), s.attempts, strings.Join(fs, " "), s.errSample)
}
