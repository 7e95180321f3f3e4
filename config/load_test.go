package config

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Parse errors (bad durations, bad numbers) and validation errors of the
// other variables are reported together, one line per variable, and a
// variable that did not parse gets no second line from validation.
func TestLoadReportsEveryProblemAtOnce(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		env  []string
		want []string // the error's lines, in order
	}{
		{"parse and validation errors together",
			[]string{dsn, "INBOXD_LEASE=5", "INBOXD_WORKERS=0", "INBOXD_MAX_ATTEMPTS=lots", "INBOXD_KAFKA_START_OFFSET=middle"},
			[]string{
				"INBOXD_MAX_ATTEMPTS: not a whole number",
				"INBOXD_LEASE: not a duration (use Go syntax such as 250ms, 30s, 5m)",
				`INBOXD_KAFKA_START_OFFSET: must be first or last, got "middle"`,
				"INBOXD_WORKERS: must be between 1 and 10000, got 0",
			}},
		{"missing database url and a bad boolean",
			[]string{"INBOXD_KAFKA_TLS=maybe", "INBOXD_LOG_LEVEL=loud"},
			[]string{
				"INBOXD_KAFKA_TLS: not a boolean (use true or false)",
				"INBOXD_DATABASE_URL: is required (or set INBOXD_DATABASE_URL_FILE)",
				`INBOXD_LOG_LEVEL: must be debug, info, warn or error, got "loud"`,
			}},
		// The cross-field check of INBOXD_BACKOFF_MAX would compare against
		// INBOXD_BACKOFF_BASE's default: it waits until the base parses.
		{"a check that names a variable that did not parse is left out",
			[]string{dsn, "INBOXD_BACKOFF_BASE=soon", "INBOXD_BACKOFF_MAX=1ms", "INBOXD_STATEMENT_TIMEOUT=0s"},
			[]string{
				"INBOXD_BACKOFF_BASE: not a duration (use Go syntax such as 250ms, 30s, 5m)",
				`INBOXD_STATEMENT_TIMEOUT: must be at least 100ms, got "0s"`,
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Load(tt.env)
			if err == nil {
				t.Fatal("accepted")
			}
			if got := strings.Split(err.Error(), "\n"); !slices.Equal(got, tt.want) {
				t.Fatalf("error lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

// A secret file that cannot be read is reported with the other problems,
// and INBOXD_DATABASE_URL is not also called missing.
func TestLoadReportsSecretFileWithTheRest(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "missing")
	_, err := Load([]string{"INBOXD_DATABASE_URL_FILE=" + missing, "INBOXD_WORKERS=0"})
	if err == nil {
		t.Fatal("accepted")
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "INBOXD_DATABASE_URL_FILE: cannot read") ||
		!strings.HasPrefix(lines[1], "INBOXD_WORKERS: must be between") {
		t.Fatalf("error lines: %q", lines)
	}
}
