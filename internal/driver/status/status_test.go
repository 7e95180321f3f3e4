package status_test

import (
	"context"
	"regexp"
	"slices"
	"testing"

	"github.com/inboxd/inboxd/internal/driver/status"
	"github.com/inboxd/inboxd/internal/pgtest"
)

// The schema's check constraint on inbox.status (inbox_status_check, by
// name: the lease check mentions statuses too) allows exactly these
// statuses.
func TestStatusesMatchTheSchema(t *testing.T) {
	db := pgtest.New(t)
	var def string
	if err := db.Pool.QueryRow(context.Background(), `
		SELECT pg_get_constraintdef(c.oid)
		FROM pg_constraint AS c
		WHERE c.conrelid = 'inbox'::regclass AND c.contype = 'c' AND c.conname = 'inbox_status_check'`).Scan(&def); err != nil {
		t.Fatal(err)
	}
	var inSchema []string
	for _, m := range regexp.MustCompile(`'([a-z]+)'::text`).FindAllStringSubmatch(def, -1) {
		inSchema = append(inSchema, m[1])
	}
	slices.Sort(inSchema)
	want := status.Strings(status.All)
	slices.Sort(want)
	if !slices.Equal(inSchema, want) {
		t.Errorf("the schema allows %v (%s), the Go set is %v", inSchema, def, want)
	}
}
