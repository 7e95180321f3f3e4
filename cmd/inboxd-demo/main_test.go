package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/internal/pgtest"
)

// The README's quick start runs this demo; it must keep working.
func TestDemo(t *testing.T) {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := "inboxd_demo_test_" + hex.EncodeToString(b)
	t.Setenv("INBOXD_DEMO_DATABASE_URL", pgtest.AdminURL())
	t.Cleanup(func() {
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, pgtest.AdminURL())
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Error(err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, []string{"--events", "600", "--database", name}, &out); err != nil {
		t.Fatalf("demo failed: %v\n%s", err, out.String())
	}
	for _, want := range []string{
		"duplicates absorbed        60",
		"sink deliveries           600  for 600 distinct Idempotency-Keys",
		"http 422 Unprocessable Entity",
		"missing event id",
		"all as expected",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo output lacks %q:\n%s", want, out.String())
		}
	}
}
