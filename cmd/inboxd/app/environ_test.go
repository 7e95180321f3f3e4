package app

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/inboxd/inboxd/config"
)

func TestMigrateEnviron(t *testing.T) {
	t.Parallel()
	base := []string{"INBOXD_DATABASE_URL=postgres://rt@h/db", "INBOXD_WORKERS=4"}
	if got := migrateEnviron(base); !slices.Equal(got, base) {
		t.Errorf("without a migrate URL: %q", got)
	}
	got := migrateEnviron(append(slices.Clone(base), "INBOXD_MIGRATE_DATABASE_URL=postgres://mig@h/db"))
	c, err := config.Load(got)
	if err != nil || c.DatabaseURL != "postgres://mig@h/db" || c.Workers != 4 {
		t.Errorf("with a migrate URL: %q → %v %q", got, err, c.DatabaseURL)
	}
	file := filepath.Join(t.TempDir(), "url")
	if err := os.WriteFile(file, []byte("postgres://mig2@h/db\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err = config.Load(migrateEnviron(append(slices.Clone(base), "INBOXD_MIGRATE_DATABASE_URL_FILE="+file)))
	if err != nil || c.DatabaseURL != "postgres://mig2@h/db" {
		t.Errorf("with a migrate URL file: %v %q", err, c.DatabaseURL)
	}
}
