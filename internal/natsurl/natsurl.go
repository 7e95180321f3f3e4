// Package natsurl holds the rules of INBOXD_NATS_URL in one place, for the
// configuration and the NATS source alike: a nats:// or tls:// URL or a
// comma list of them, and its redaction for logs.
package natsurl

import (
	"net/url"
	"strings"
)

// Servers splits a comma list of server URLs, dropping empty entries.
func Servers(s string) []string {
	var out []string
	for _, u := range strings.Split(s, ",") {
		if u = strings.TrimSpace(u); u != "" {
			out = append(out, u)
		}
	}
	return out
}

// Valid reports whether s is one or more nats:// or tls:// URLs with a
// host, comma separated.
func Valid(s string) bool {
	servers := Servers(s)
	for _, srv := range servers {
		if u, err := url.Parse(srv); err != nil || (u.Scheme != "nats" && u.Scheme != "tls") || u.Host == "" {
			return false
		}
	}
	return len(servers) > 0
}

// TLS reports whether any of the URLs asks for TLS (tls://).
func TLS(s string) bool {
	for _, srv := range Servers(s) {
		if strings.HasPrefix(strings.ToLower(srv), "tls://") {
			return true
		}
	}
	return false
}

// Redact reduces each URL of s to scheme://user@host: never a password,
// nor a token (a user without a password, shown as [redacted]), nor
// anything of a URL that does not parse ("(invalid)").
func Redact(s string) string {
	servers := Servers(s)
	out := make([]string, 0, len(servers))
	for _, srv := range servers {
		u, err := url.Parse(srv)
		if err != nil || u.Host == "" {
			out = append(out, "(invalid)")
			continue
		}
		r := url.URL{Scheme: u.Scheme, Host: u.Host}
		if u.User != nil {
			if _, ok := u.User.Password(); ok {
				r.User = url.User(u.User.Username())
			} else {
				r.User = url.User("[redacted]")
			}
		}
		out = append(out, r.String())
	}
	return strings.Join(out, ",")
}
