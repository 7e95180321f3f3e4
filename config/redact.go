package config

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/internal/brokers/amqpconn"
	"github.com/inboxd/inboxd/internal/natsurl"
	"github.com/inboxd/inboxd/internal/opfiles"
)

// This file keeps secrets out of logs and errors.
//
// pgx parses connection URLs the way libpq does: the user information ends at
// the first "@" before the first "/", query parameters are split at every "&",
// and repeated keys silently take the last value. A password with an
// unescaped "@", "/", "?" or "&" therefore does not fail to parse: part of it
// lands in the host, the database or a runtime parameter, from where it
// reaches the "starting" log line and connection errors ("lookup
// ssw0rd@127.0.0.1: no such host"). checkConnString refuses every such string
// before anything is logged, and RedactURL prints nothing for it.

// The reasons checkConnString gives. They are fixed text: none quotes the
// connection string.
var (
	errMoreThanOneAt = errors.New(`is ambiguous: it has more than one "@"; percent-encode "@" in the user name, password and parameters as %40 (postgres://user:p%40ss@host/db)`)
	errAtAfterSlash  = errors.New(`is ambiguous: its "@" comes after a "/" or "?"; percent-encode "@", "/" and "?" in the user name, password and parameters as %40, %2F and %3F`)
	errQueryName     = errors.New(`is ambiguous: a query parameter name has characters other than letters, digits, "_" and "."; percent-encode "&" and "=" in the password as %26 and %3D`)
	errQueryAfterPW  = errors.New(`is ambiguous: the query parameter after password= is not a known connection parameter; percent-encode "&" in the password as %26, or put password= last`)
	errKVName        = errors.New(`is ambiguous: a parameter name has characters other than letters, digits, "_" and "." (a URL must start with postgres:// or postgresql://, in lower case); quote values that contain spaces or quotes: password='…', with \' and \\ inside`)
	errKVAfterPW     = errors.New(`is ambiguous: the parameter after password= is not a known connection parameter; quote the password (password='…', with \' and \\ inside), or put password= last`)
)

// errTwice reports a parameter set twice (pgx keeps the last one), naming it
// only when it is a known keyword: an unknown name may be a piece of a
// password.
func errTwice(key string, isURL bool) error {
	name := "a parameter"
	if knownKey(key) {
		name = key
	}
	if isURL {
		return fmt.Errorf(`is ambiguous: it sets %s twice; set it once (percent-encode "&" in the password as %%26)`, name)
	}
	return fmt.Errorf(`is ambiguous: it sets %s twice; set it once (quote a password that contains spaces: password='…')`, name)
}

// checkConnString returns nil when s can be parsed in only one way, as far as
// the password is concerned, and otherwise an error telling how to fix it. The
// error never quotes s nor any part of it: at most a known parameter name.
// Strings that are merely invalid are left to pgx.ParseConfig.
func checkConnString(s string) error {
	if rest, ok := strings.CutPrefix(s, "postgres://"); ok {
		return checkURL(rest)
	}
	if rest, ok := strings.CutPrefix(s, "postgresql://"); ok {
		return checkURL(rest)
	}
	return checkKeywordValue(s)
}

// checkURL checks a connection URL without its scheme.
func checkURL(rest string) error {
	switch at := strings.IndexByte(rest, '@'); {
	case strings.Count(rest, "@") > 1:
		return errMoreThanOneAt
	case at >= 0 && strings.ContainsAny(rest[:at], "/?"):
		return errAtAfterSlash
	}

	// What the authority already sets: a query parameter repeating one of
	// these is ambiguous (last one wins in pgx).
	seen := map[string]bool{}
	p := rest
	if at := strings.IndexByte(p, '@'); at >= 0 {
		user, password, hasPassword := strings.Cut(p[:at], ":")
		seen["user"] = user != ""
		seen["password"] = hasPassword && password != ""
		p = p[at+1:]
	}
	hostPort := p
	if i := strings.IndexAny(hostPort, "/?"); i >= 0 {
		hostPort = hostPort[:i]
	}
	seen["host"], seen["port"] = hostPortGiven(hostPort)
	query := ""
	if i := strings.IndexByte(p, '?'); i >= 0 {
		p, query = p[:i], p[i+1:]
	}
	if i := strings.IndexByte(p, '/'); i >= 0 {
		seen["database"] = p[i+1:] != ""
	}
	if query == "" {
		return nil
	}
	afterSecret := false
	for pair := range strings.SplitSeq(query, "&") {
		rawKey, _, _ := strings.Cut(pair, "=")
		key, err := url.PathUnescape(strings.Trim(rawKey, " "))
		if err != nil {
			return errQueryName
		}
		key = canonicalKey(key)
		if !validKeyName(key) {
			return errQueryName
		}
		if afterSecret && !knownKey(key) {
			return errQueryAfterPW
		}
		if seen[key] {
			return errTwice(key, true)
		}
		seen[key] = true
		afterSecret = secretKey(key)
	}
	return nil
}

// hostPortGiven reports whether a URL's host list (h1:p1,[::1]:p2,…) names
// a host and a port.
func hostPortGiven(hostPort string) (host, port bool) {
	for h := range strings.SplitSeq(hostPort, ",") {
		name, rest := h, ""
		if strings.HasPrefix(h, "[") {
			if i := strings.IndexByte(h, ']'); i >= 0 {
				name, rest = h[:i+1], h[i+1:]
			}
		} else if i := strings.IndexByte(h, ':'); i >= 0 {
			name, rest = h[:i], h[i:]
		}
		host = host || strings.TrimSpace(name) != ""
		port = port || strings.TrimSpace(strings.TrimPrefix(rest, ":")) != ""
	}
	return host, port
}

// checkKeywordValue checks a key=value connection string, tokenised exactly
// as pgx does it.
func checkKeywordValue(s string) error {
	const space = " \t\n\r\v\f"
	seen := map[string]bool{}
	afterSecret := false
	s = strings.TrimLeft(s, space)
	for s != "" {
		eq := strings.IndexByte(s, '=')
		if eq < 0 {
			return nil // pgx refuses it
		}
		key := strings.Trim(s[:eq], space)
		if strings.ContainsAny(key, space) {
			return nil // pgx refuses it
		}
		key = canonicalKey(key)
		if !validKeyName(key) {
			return errKVName
		}
		if afterSecret && !knownKey(key) {
			return errKVAfterPW
		}
		if seen[key] {
			return errTwice(key, false)
		}
		seen[key] = true
		afterSecret = secretKey(key)

		s = strings.TrimLeft(s[eq+1:], space)
		if s == "" {
			break
		}
		end := 0
		if s[0] == '\'' {
			s = s[1:]
			for ; end < len(s) && s[end] != '\''; end++ {
				if s[end] == '\\' {
					end++
				}
			}
			if end >= len(s) {
				return nil // unterminated: pgx refuses it
			}
			end++ // the closing quote
		} else {
			for ; end < len(s) && !strings.ContainsRune(space, rune(s[end])); end++ {
				if s[end] == '\\' {
					end++
				}
			}
			end = min(end, len(s))
		}
		s = strings.TrimLeft(s[end:], space)
	}
	return nil
}

// canonicalKey spells a parameter name the way pgx stores it.
func canonicalKey(k string) string {
	if k == "dbname" {
		return "database"
	}
	return k
}

// validKeyName reports whether k can be a libpq keyword or a server setting
// name. Anything else (for example an upper-case "POSTGRES://u:pw@h/db?x",
// which pgx reads as one keyword) would be sent to the server as a setting
// name and quoted back in its error.
func validKeyName(k string) bool {
	if k == "" {
		return false
	}
	for i, r := range k {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r == '_':
		case i > 0 && (r >= '0' && r <= '9' || r == '.'):
		default:
			return false
		}
	}
	return true
}

func secretKey(k string) bool { return k == "password" || k == "sslpassword" }

// knownKeys are the libpq connection keywords, pgx's own options and a few
// common server settings: the parameters that may follow password= (text
// after an unquoted space or an unescaped "&" in a password would start an
// unknown one).
var knownKeys = func() map[string]bool {
	m := map[string]bool{}
	for _, k := range strings.Fields(`
		host hostaddr port database user password passfile require_auth channel_binding
		connect_timeout client_encoding options application_name fallback_application_name
		keepalives keepalives_idle keepalives_interval keepalives_count tcp_user_timeout
		replication gssencmode sslmode sslnegotiation sslcompression sslcert sslkey sslcertmode
		sslpassword sslkeylogfile sslrootcert sslcrl sslcrldir sslsni requirepeer
		ssl_min_protocol_version ssl_max_protocol_version min_protocol_version max_protocol_version
		krbsrvname krbspn gsslib gssdelegation service servicefile target_session_attrs
		load_balance_hosts ssl
		pool_max_conns pool_min_conns pool_min_idle_conns pool_max_conn_lifetime
		pool_max_conn_lifetime_jitter pool_max_conn_idle_time pool_health_check_period
		pool_ping_timeout statement_cache_capacity description_cache_capacity default_query_exec_mode
		search_path timezone datestyle intervalstyle extra_float_digits statement_timeout lock_timeout
		idle_in_transaction_session_timeout idle_session_timeout role work_mem jit`) {
		m[k] = true
	}
	return m
}()

// knownKey matches as pgx does: exactly. pgx sends "Host" or "hOst" to the
// server as a setting name, so text after a raw password that spells a known
// keyword in another case is as ambiguous as an unknown name.
func knownKey(k string) bool { return knownKeys[k] }

// Redacted returns the database URL with any password removed, for logs.
// Key=value connection strings are shown as a URL too.
func (c Config) Redacted() string { return RedactURL(c.DatabaseURL) }

// RedactURL reduces a PostgreSQL connection string (URL or key=value) to
// postgres://user@host:port/db, for logs: no password, no other parameters.
// A string that does not parse, or that would parse in a way that moves part
// of a password into another field (see Config.Validate), gives "(invalid)".
// Nothing from the password is ever returned, whatever the input.
func RedactURL(s string) string {
	if checkConnString(s) != nil {
		return "(invalid)"
	}
	cfg, err := pgx.ParseConfig(s)
	if err != nil {
		return "(invalid)"
	}
	u := url.URL{Scheme: "postgres", Path: "/" + cfg.Database}
	if cfg.User != "" {
		u.User = url.User(cfg.User)
	}
	// The host list, without the repeats pgx adds for TLS fallbacks.
	var hosts, sockets []string
	have := map[string]bool{}
	add := func(host string, port uint16) {
		hp := net.JoinHostPort(host, strconv.Itoa(int(port)))
		if have[hp] {
			return
		}
		have[hp] = true
		if strings.HasPrefix(host, "/") {
			sockets = append(sockets, host)
			if len(hosts) == 0 {
				hosts = append(hosts, ":"+strconv.Itoa(int(port)))
			}
			return
		}
		hosts = append(hosts, hp)
	}
	add(cfg.Host, cfg.Port)
	for _, f := range cfg.Fallbacks {
		add(f.Host, f.Port)
	}
	u.Host = strings.Join(hosts, ",")
	if len(sockets) > 0 {
		u.RawQuery = url.Values{"host": {strings.Join(sockets, ",")}}.Encode()
	}
	return u.String()
}

// String describes the configuration with the database URL redacted and the
// SASL password replaced, so printing a Config with %v or %+v shows no secret.
func (c Config) String() string { return fmt.Sprintf("%+v", c.redacted()) }

// GoString is String for %#v.
func (c Config) GoString() string {
	return "config.Config" + strings.TrimPrefix(fmt.Sprintf("%#v", c.redacted()), "config.plainConfig")
}

// plainConfig is Config without its methods, for String and GoString.
type plainConfig Config

func (c Config) redacted() plainConfig {
	c.DatabaseURL = RedactURL(c.DatabaseURL)
	if c.KafkaSASLPassword != "" {
		c.KafkaSASLPassword = "[redacted]"
	}
	if c.AMQPURL != "" {
		c.AMQPURL = amqpconn.RedactURL(c.AMQPURL)
	}
	if c.NATSURL != "" {
		c.NATSURL = natsurl.Redact(c.NATSURL)
	}
	return plainConfig(c)
}

// maxSecretFileBytes bounds a secret file (a password, a connection string):
// a *_FILE variable naming something larger (a log, a device) is refused at
// start instead of read whole into memory.
const maxSecretFileBytes = 64 << 10

// readSecret reads a secret from the file named by a *_FILE variable. Its
// error never repeats the variable's value: a password or connection string
// put there by mistake would otherwise be printed as the "path".
func readSecret(path string) (string, error) {
	b, err := opfiles.Read(path, maxSecretFileBytes)
	if errors.Is(err, opfiles.ErrTooLarge) {
		return "", fmt.Errorf("cannot read the file it names: larger than %d KiB (a secret file holds the secret alone)", maxSecretFileBytes>>10)
	}
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", errors.New("cannot read the file it names: no such file (it must name a file holding the secret, not the secret itself)")
		}
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the path is the variable's value: leave it out
		}
		return "", fmt.Errorf("cannot read the file it names: %w", err)
	}
	return strings.TrimRight(string(b), "\r\n"), nil
}
