package app

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/inboxd/inboxd/ingest"

	"github.com/inboxd/inboxd/config"
	"github.com/inboxd/inboxd/internal/ingestcore"
	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/syncbuf"
	"github.com/inboxd/inboxd/internal/testkit"
	"github.com/rs/zerolog"
	"github.com/segmentio/kafka-go"
)

// `inboxd ui` serves the console alone: the overview shows the database's
// rows, / redirects to /ui/, and, without INBOXD_UI_TOKEN_FILE, an action
// is refused with 403.
func TestUICommandServesTheConsoleAlone(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	if _, err := db.Pool.Exec(context.Background(), `INSERT INTO inbox (source, event_id, event_type, status, last_error)
		SELECT 's', 'e' || g, 't', 'dead', 'boom' FROM generate_series(1, 4) AS g`); err != nil {
		t.Fatal(err)
	}
	env := []string{"INBOXD_DATABASE_URL=" + db.URL, "INBOXD_HTTP_ADDR=127.0.0.1:0"}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	logs := &syncbuf.Buffer{}
	go func() { done <- Main(ctx, []string{"ui"}, env, &bytes.Buffer{}, logs, Options{}) }()
	defer func() {
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("ui exit %d after cancellation:\n%s", code, logs.String())
			}
		case <-time.After(30 * time.Second):
			t.Error("ui did not stop")
		}
	}()
	var addr string
	testkit.WaitForReport(t, 30*time.Second, func() (bool, string) {
		m := regexp.MustCompile(`"addr":"([^"]+)"[^\n]*"message":"serving the console`).FindStringSubmatch(logs.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil, "the console's address in the logs:\n" + logs.String()
	})
	resp, err := http.Get("http://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.Request.URL.Path != "/ui/" || !strings.Contains(string(body), `id="n-dead">4<`) {
		t.Errorf("GET / ended at %s without the 4 dead rows:\n%s", resp.Request.URL.Path, body)
	}
	resp, err = http.PostForm("http://"+addr+"/ui/requeue", map[string][]string{"status": {"dead"}, "confirm": {"yes"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("an action on a read-only console: %d, want 403", resp.StatusCode)
	}
}

// A token file that cannot be read, or holds too short a token, stops the
// command with a line naming INBOXD_UI_TOKEN_FILE and never its content.
func TestUITokenFileErrors(t *testing.T) {
	t.Parallel()
	short := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(short, []byte("abc\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{filepath.Join(t.TempDir(), "missing"), short} {
		code, _, stderr := runMain(t, []string{"INBOXD_DATABASE_URL=postgres://127.0.0.1:1/x", "INBOXD_UI_TOKEN_FILE=" + f}, "ui")
		if code != ExitUsage || !strings.Contains(stderr, "INBOXD_UI_TOKEN_FILE:") || strings.Contains(stderr, "abc") {
			t.Errorf("token file %s: exit %d, stderr:\n%s", f, code, stderr)
		}
	}
}

// startConsole serves the console of the configuration env (with a token
// of its own) until t ends, and returns a function that POSTs a form to
// its /ui/requeue and returns the answer's body (an answer other than 200
// fails t).
func startConsole(t *testing.T, env []string) (requeue func(url.Values) string) {
	t.Helper()
	tokenFile := filepath.Join(t.TempDir(), "token")
	const token = "console-test-token-0123456789"
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(append(env[:len(env):len(env)], "INBOXD_UI_TOKEN_FILE="+tokenFile))
	if err != nil {
		t.Fatal(err)
	}
	h, closeDB, err := openConsole(context.Background(), cfg, nil, &routesInForce{}, nil, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		srv.Close()
		closeDB()
	})
	return func(form url.Values) string { return consolePost(t, srv.URL+"/ui/requeue", token, form) }
}

// consolePost POSTs form to the console's url with the bearer token and
// returns the answer's body; an answer other than 200 fails t.
func consolePost(t *testing.T, url, token string, form url.Values) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %v: %d\n%s", form, resp.StatusCode, b)
	}
	return string(b)
}

// The console re-maps a rejected row with this process's mapping settings,
// by the rules `inboxd requeue --status rejected` applies: with the type
// header the producer used now configured, the dry run counts the row and
// the action hands it to the workers under its own event id.
func TestConsoleRequeuesRejectedRowsWithTheConfiguration(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	strict := ingest.MapOptions{MaxPayload: 1024}
	m := kafka.Message{Topic: "orders", Partition: 1, Offset: 7, Key: []byte("k"), Value: []byte(`{}`),
		Headers: headers("event_id", "ev-7", "kind", "order.created")}
	id, row := ingestMessage(t, db, m, strict)
	if row.Status != ingestcore.StatusRejected {
		t.Fatalf("setup: %+v", row)
	}
	do := startConsole(t, []string{"INBOXD_DATABASE_URL=" + db.URL, "INBOXD_EVENT_TYPE_HEADERS=event_type,kind",
		"INBOXD_MAX_PAYLOAD=1024"})
	form := url.Values{"status": {"rejected"}, "id": {itoa(id)}}
	if body := do(form); !strings.Contains(body, `id="count">1<`) {
		t.Fatalf("dry run does not count the row:\n%s", body)
	}
	if st := stateOf(t, db, id); st.Status != "rejected" {
		t.Fatalf("the dry run changed the row to %s", st.Status)
	}
	form.Set("confirm", "yes")
	do(form)
	var status, eventID, eventType string
	if err := db.Pool.QueryRow(context.Background(), `SELECT status, event_id, event_type FROM inbox WHERE id = $1`, id).
		Scan(&status, &eventID, &eventType); err != nil {
		t.Fatal(err)
	}
	if status != "received" || eventID != "ev-7" || eventType != "order.created" {
		t.Fatalf("after the requeue: %s %s %s, want received ev-7 order.created", status, eventID, eventType)
	}
}

// The reported case (issue 25, item 11): INBOXD_HTTP_ADDR defaults to
// :8080, every interface, and the console was served there to anyone
// without a token configured. Without INBOXD_UI_TOKEN_FILE on an address
// that is not loopback, `inboxd run` serves /healthz and /metrics but not
// the console, and says in a structured start-up line how to serve it;
// `inboxd ui` refuses to start; with a token, every page asks for it.
func TestConsoleNotServedOffLoopbackWithoutToken(t *testing.T) {
	t.Parallel()
	addr, logs := runHTTPDaemon(t, "INBOXD_HTTP_ADDR=0.0.0.0:0")
	_, port, _ := net.SplitHostPort(addr)
	local := "http://127.0.0.1:" + port
	for path, want := range map[string]int{"/ui/": http.StatusNotFound, "/ui/rows?status=dead": http.StatusNotFound,
		"/healthz": http.StatusOK, "/metrics": http.StatusOK} {
		resp, err := http.Get(local + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want || strings.Contains(string(body), "Overview") {
			t.Errorf("GET %s on 0.0.0.0 without a token: %d, want %d\n%s", path, resp.StatusCode, want, body)
		}
	}
	line := regexp.MustCompile(`\{[^\n]*"component":"console"[^\n]*"enable":"set INBOXD_UI_USERS_FILE[^\n]*\}`).FindString(logs.String())
	if line == "" || !strings.Contains(line, `"level":"warn"`) || !strings.Contains(line, "not served") {
		t.Errorf("no structured start-up line saying the console is not served and how to serve it:\n%s", logs.String())
	}

	code, _, stderr := runMain(t, []string{"INBOXD_DATABASE_URL=" + pgtest.New(t).URL, "INBOXD_HTTP_ADDR=0.0.0.0:0"}, "ui")
	if code != ExitUsage || !strings.Contains(stderr, "INBOXD_UI_TOKEN_FILE") || !strings.Contains(stderr, "loopback") {
		t.Errorf("inboxd ui on 0.0.0.0 without a token: exit %d, want %d naming INBOXD_UI_TOKEN_FILE and loopback:\n%s", code, ExitUsage, stderr)
	}

	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("off-loopback-token-0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr, _ = runHTTPDaemon(t, "INBOXD_HTTP_ADDR=0.0.0.0:0", "INBOXD_UI_TOKEN_FILE="+tokenFile)
	_, port, _ = net.SplitHostPort(addr)
	resp, err := http.Get("http://127.0.0.1:" + port + "/ui/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /ui/ on 0.0.0.0 with a token and no credential: %d, want 401", resp.StatusCode)
	}
}
