package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxd/inboxd/cmd/inboxd/app"
	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/syncbuf"
	"github.com/inboxd/inboxd/internal/testkit"
)

// The demo drops only a database it created itself: one of the same name
// that it did not create is left alone, and the demo says why.
func TestDemoRefusesADatabaseItDidNotCreate(t *testing.T) {
	name := demoDatabase(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err = run(ctx, []string{"--events", "500", "--database", name}, &out)
	if err == nil || !strings.Contains(err.Error(), "no demo run created it") {
		t.Fatalf("demo on a database it did not create: %v\n%s", err, out.String())
	}
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname = $1", name).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the database is gone (%d, %v)", n, err)
	}
}

// make demo KEEP=1: after the summary the daemon keeps running with its
// console, and the printed INBOXD_DATABASE_URL works for the CLI; a second
// run drops the first run's database (it is marked) and says so.
func TestDemoKeep(t *testing.T) {
	name := demoDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out syncbuf.Buffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--events", "500", "--database", name, "--keep", "--http", "127.0.0.1:0"}, &out)
	}()
	testkit.WaitFor(t, 90*time.Second, "the console's URL", func() bool { return strings.Contains(out.String(), "console  http://") })
	text := out.String()
	console := regexp.MustCompile(`console  (http://\S+/ui/)`).FindStringSubmatch(text)[1]
	resp, err := http.Get(strings.TrimSuffix(console, "/ui/") + "/healthz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the kept daemon's /healthz: %v %v", resp, err)
	}
	resp.Body.Close()
	if resp, err = http.Get(console); err != nil || resp.StatusCode >= 500 {
		t.Fatalf("the console: %v %v", resp, err)
	}
	resp.Body.Close()
	m := regexp.MustCompile(`INBOXD_DATABASE_URL='([^']+)' bin/inboxd stats`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("no CLI line in:\n%s", text)
	}
	var stats bytes.Buffer
	if code := app.Main(ctx, []string{"stats"}, []string{"INBOXD_DATABASE_URL=" + m[1]}, &stats, io.Discard, app.Options{}); code != 0 || !strings.Contains(stats.String(), "dead") {
		t.Fatalf("inboxd stats with the printed URL: exit %d\n%s", code, stats.String())
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("the kept demo after Ctrl-C: %v", err)
	}
	var again bytes.Buffer
	if err := run(context.Background(), []string{"--events", "500", "--database", name, "--http", "127.0.0.1:0"}, &again); err != nil {
		t.Fatalf("second run: %v\n%s", err, again.String())
	}
	if !strings.Contains(again.String(), "dropped "+name+", which an earlier demo run created") {
		t.Errorf("the second run does not say it dropped the first run's database:\n%s", again.String())
	}
}

// inboxd-demo send puts test events into a real run on each source: the
// events of one send become rows (the duplicate absorbed) in the daemon's
// inbox.
func TestSendToARealRun(t *testing.T) {
	for _, kind := range sendKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			db := pgtest.New(t)
			dir := t.TempDir()
			routes := filepath.Join(dir, "routes.yaml")
			if err := os.WriteFile(routes, []byte("default: ignore\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			env := []string{"INBOXD_DATABASE_URL=" + db.URL, "INBOXD_ROUTES=" + routes, "INBOXD_HTTP_ADDR="}
			var send []string
			switch kind {
			case "kafka":
				port := freePort(t)
				kctx, stop := context.WithCancel(context.Background())
				kdone := make(chan error, 1)
				var kout syncbuf.Buffer
				go func() { kdone <- runKafka(kctx, []string{"--port", strconv.Itoa(port)}, &kout) }()
				t.Cleanup(func() { stop(); <-kdone })
				testkit.WaitFor(t, 10*time.Second, "the embedded broker", func() bool { return strings.Contains(kout.String(), "embedded broker at") })
				brokers := "127.0.0.1:" + strconv.Itoa(port)
				env = append(env, "INBOXD_KAFKA_BROKERS="+brokers, "INBOXD_KAFKA_TOPICS=orders")
				send = []string{"--brokers", brokers}
			case "rabbitmq":
				conn, err := amqp.Dial(testkit.AMQPURL())
				if err != nil {
					testkit.Unavailable(t, "no RabbitMQ (rabbitmq-server -detached): "+err.Error())
				}
				queue := demoName("inboxd-send-test-")
				t.Cleanup(func() {
					if ch, err := conn.Channel(); err == nil {
						_, _ = ch.QueueDelete(queue, false, false, false)
					}
					_ = conn.Close()
				})
				// send declares the queue; the daemon needs it to exist.
				if err := run(context.Background(), []string{"send", "--source", "rabbitmq", "--amqp-url", testkit.AMQPURL(), "--queue", queue, "--events", "1"}, io.Discard); err != nil {
					t.Fatal(err)
				}
				env = append(env, "INBOXD_AMQP_URL="+testkit.AMQPURL(), "INBOXD_AMQP_QUEUES="+queue)
				send = []string{"--amqp-url", testkit.AMQPURL(), "--queue", queue}
			case "nats":
				nc, err := nats.Connect(testkit.NATSURL())
				if err != nil {
					testkit.Unavailable(t, "no NATS (nats-server -js): "+err.Error())
				}
				stream := demoName("INBOXD_SEND_TEST_")
				t.Cleanup(func() {
					if js, err := jetstream.New(nc); err == nil {
						_ = js.DeleteStream(context.Background(), stream)
					}
					nc.Close()
				})
				if err := run(context.Background(), []string{"send", "--source", "nats", "--nats-url", testkit.NATSURL(), "--stream", stream, "--events", "1"}, io.Discard); err != nil {
					t.Fatal(err)
				}
				env = append(env, "INBOXD_NATS_URL="+testkit.NATSURL(), "INBOXD_NATS_STREAMS="+stream)
				send = []string{"--nats-url", testkit.NATSURL(), "--stream", stream}
			case "webhook":
				secret := filepath.Join(dir, "payments.secret")
				if err := os.WriteFile(secret, []byte("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n"), 0o600); err != nil {
					t.Fatal(err)
				}
				sources := filepath.Join(dir, "webhooks.yaml")
				if err := os.WriteFile(sources, []byte("sources:\n  - name: payments\n    verify: standard-webhooks\n    secret_file: "+secret+"\n"), 0o600); err != nil {
					t.Fatal(err)
				}
				addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
				env = append(env, "INBOXD_WEBHOOK_ADDR="+addr, "INBOXD_WEBHOOK_SOURCES="+sources)
				send = []string{"--url", "http://" + addr + "/webhooks/payments", "--secret-file", secret}
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan int, 1)
			var logs syncbuf.Buffer
			go func() { done <- app.Main(ctx, []string{"run"}, env, io.Discard, &logs, app.Options{}) }()
			t.Cleanup(func() {
				cancel()
				if code := <-done; code != 0 {
					t.Errorf("inboxd run exited %d:\n%s", code, logs.String())
				}
			})
			testkit.WaitFor(t, 30*time.Second, "inboxd running", func() bool { return strings.Contains(logs.String(), `"message":"running"`) })
			var out bytes.Buffer
			if err := run(context.Background(), append([]string{"send", "--source", kind, "--events", "5"}, send...), &out); err != nil {
				t.Fatalf("send: %v\n%s", err, out.String())
			}
			want := 5
			if kind == "rabbitmq" || kind == "nats" {
				want = 6 // the event the queue or stream was created with
			}
			testkit.WaitFor(t, 30*time.Second, fmt.Sprintf("%d rows", want), func() bool {
				var n int
				_ = db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM inbox WHERE event_type = 'order.created'").Scan(&n)
				return n == want
			})
		})
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
