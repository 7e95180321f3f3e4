package app

import (
	"strings"
)

// migrateEnviron returns environ as `inboxd migrate` reads it: when
// INBOXD_MIGRATE_DATABASE_URL or INBOXD_MIGRATE_DATABASE_URL_FILE is set
// (non-empty), it replaces INBOXD_DATABASE_URL and INBOXD_DATABASE_URL_FILE,
// so migrations run as the migrator role while the daemon runs as the
// runtime role. Otherwise environ is returned unchanged.
func migrateEnviron(environ []string) []string {
	var url, file string
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "INBOXD_MIGRATE_DATABASE_URL":
			url = v
		case "INBOXD_MIGRATE_DATABASE_URL_FILE":
			file = v
		}
	}
	if url == "" && file == "" {
		return environ
	}
	out := make([]string, 0, len(environ)+2)
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		if k != "INBOXD_DATABASE_URL" && k != "INBOXD_DATABASE_URL_FILE" {
			out = append(out, kv)
		}
	}
	if url != "" {
		return append(out, "INBOXD_DATABASE_URL="+url)
	}
	return append(out, "INBOXD_DATABASE_URL_FILE="+file)
}
