package app

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/syncbuf"
	"github.com/inboxd/inboxd/internal/testkit"
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
