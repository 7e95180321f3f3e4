package app

import (
	"fmt"
	"os"
	"os/user"
	"strings"

	"github.com/inboxd/inboxd/config"
	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/internal/opfiles/routesfile"
	"github.com/inboxd/inboxd/internal/ops"
)

// cliOperator is who runs the CLI's action cmd: --by, else
// INBOXD_OPERATOR, else $USER (or the account's name) @ the host. It never
// makes up a name: without one it is a usage error.
func cliOperator(cmd, by string, cfg config.Config, environ []string) (ops.Operator, error) {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	from := "cli " + host
	for _, name := range []string{by, cfg.Operator} {
		if name = strings.TrimSpace(name); name != "" {
			return ops.Operator{Name: name, From: from}, nil
		}
	}
	name := ""
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, "USER="); ok && strings.TrimSpace(v) != "" {
			name = strings.TrimSpace(v)
		}
	}
	if name == "" {
		if u, err := user.Current(); err == nil && u.Username != "" {
			name = u.Username
		}
	}
	if name == "" {
		return ops.Operator{}, usageError{fmt.Errorf("%s: say who acts: --by NAME or INBOXD_OPERATOR (neither $USER nor the account names anyone)", cmd)}
	}
	return ops.Operator{Name: name + "@" + host, From: from}, nil
}

// fileRoutes returns the routes of the routes file (INBOXD_ROUTES), read
// at each call: their event types, which a pause accepts before any row of
// theirs arrived, and their rate limits and breakers; nil without a routes
// file.
func fileRoutes(cfg config.Config) func() ([]handlers.RouteConfig, error) {
	if cfg.Routes == "" {
		return nil
	}
	return func() ([]handlers.RouteConfig, error) {
		r, err := routesfile.Load(cfg.Routes)
		if err != nil {
			return nil, err
		}
		return r.Routes, nil
	}
}
