package webhook

import (
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/inboxd/inboxd/ingest"
	"github.com/inboxd/inboxd/internal/handoff"
	"github.com/inboxd/inboxd/internal/ingestcore"

	"github.com/inboxd/inboxd/internal/sensitive"
)

// The verification schemes of a webhook source (its verify field).
const (
	// Standard is the Standard Webhooks specification: headers
	// webhook-id, webhook-timestamp and webhook-signature (or Svix's
	// svix-id, svix-timestamp and svix-signature), secrets base64,
	// usually after whsec_.
	Standard = "standard-webhooks"
	// HMAC is an HMAC-SHA256 of the body, hex or base64, in a named
	// header after an optional prefix.
	HMAC = "hmac-sha256"
	// GitHub is GitHub's scheme: X-Hub-Signature-256 = sha256=<hex>.
	GitHub = "github"
	// None verifies nothing; it must be stated.
	None = "none"
)

// Limits of the webhook configuration.
const (
	// DefaultMaxBody is a source's max_body when none is given.
	DefaultMaxBody = 1 << 20
	// MaxMaxBody caps max_body: a body is held in memory until its
	// batch commits.
	MaxMaxBody = 64 << 20
	// Tolerance is how far a Standard Webhooks timestamp may be from
	// the clock, either way, before the request is refused (replays).
	Tolerance = 5 * time.Minute
	// MaxReplayWindow is the longest replay_window accepted: the
	// table behind it holds a row per body received in the window.
	MaxReplayWindow = 30 * 24 * time.Hour
)

// BodySHA256 is the value of Field.Body that makes the event
// id "sha256:<hex of the body>": what the signature covers, so a signed
// body sent again, under any headers, is the same event.
const BodySHA256 = "sha256"

// Defaults of Config.
const (
	// DefaultWriteTimeout bounds how long a request waits for the
	// commit of its batch before it is answered 503.
	DefaultWriteTimeout = 10 * time.Second
	// DefaultMaxRequests caps the requests served at once; more are
	// answered 503 at once.
	DefaultMaxRequests = 1024
	// DefaultReadHeaderTimeout bounds reading a request's headers.
	DefaultReadHeaderTimeout = 10 * time.Second
	// DefaultReadTimeout bounds reading a whole request, body
	// included (slow clients).
	DefaultReadTimeout = 30 * time.Second
	// DefaultIdleTimeout closes a kept-alive connection idle this
	// long.
	DefaultIdleTimeout = 60 * time.Second
)

// Field says where a webhook request carries a value: a header, a
// top-level field of its JSON body, (event type only) a fixed value, or
// (event id only) the body's hash. Exactly one is set.
type Field struct {
	// Header is the header's name (case does not matter).
	Header string
	// JSON is a top-level field of the JSON object body.
	JSON string
	// Value is a literal (event_type only).
	Value string
	// Body is BodySHA256 (event_id only): the id is the hash of the
	// body, "sha256:<hex>".
	Body string
}

// set reports whether f says anything.
func (f Field) set() bool {
	return f.Header != "" || f.JSON != "" || f.Value != "" || f.Body != ""
}

// SourceConfig is one source of the webhook sources file: POST
// /webhooks/<Name>, verified by Verify, rows with source Name.
type SourceConfig struct {
	// Name is the path segment and the rows' source.
	Name string
	// Verify is Standard, HMAC, GitHub or None.
	Verify string
	// Secrets are the secrets accepted (several during a rotation), as
	// the secret files hold them: one per line. Standard Webhooks secrets
	// are base64, optionally after whsec_ (see standardSecret); the others
	// are used as they are.
	Secrets []string
	// Header and Prefix (HMAC) name the signature's header and what
	// comes before the MAC in it ("sha256=").
	Header, Prefix string
	// EventID, EventType and Key say where the id, the type and the key
	// (optional) are; see Field.
	EventID, EventType, Key Field
	// UnsignedID, UnsignedType and UnsignedKey allow the event id, the
	// event type and the key to come from a header that the scheme's
	// signature does not cover (the file's unsigned_id, unsigned_type and
	// unsigned_key: allow). Without the allowance such a source is refused
	// at start: anyone who holds one signed request can send its body
	// again with any value in that header.
	UnsignedID, UnsignedType, UnsignedKey bool
	// ReplayWindow (github and hmac-sha256 only; 0: none) refuses, for
	// that long, a body already received under another event id: such a
	// request is answered 200 and stores nothing. The bodies' hashes are
	// kept in the webhook_replays table, so every replica sees every
	// other's.
	ReplayWindow time.Duration
	// KeepHeaders are credential-like headers (sensitive.CredentialHeader)
	// stored with the rows all the same; the others are not stored.
	KeepHeaders []string
	// MaxBody is the largest body accepted, in bytes (default
	// DefaultMaxBody); a bigger one is answered 413.
	MaxBody int
}

// Config configures the webhook source: an HTTP listener of its
// own, receiving signed webhooks into the inbox through the
// persist-then-ack pipeline.
type Config struct {
	// Addr is the listener's address (host:port).
	Addr string
	// Sources are the webhook sources, each under /webhooks/<name>.
	Sources []SourceConfig
	// TLSCertFile and TLSKeyFile, set together, serve HTTPS.
	TLSCertFile, TLSKeyFile string
	// WriteTimeout bounds a request's wait for its batch's commit (default
	// DefaultWriteTimeout); after it the request is answered 503.
	WriteTimeout time.Duration
	// MaxRequests caps the requests served at once (default
	// DefaultMaxRequests).
	MaxRequests int
	// ReadHeaderTimeout, ReadTimeout and IdleTimeout are the server's
	// (defaults DefaultReadHeaderTimeout, DefaultReadTimeout,
	// DefaultIdleTimeout).
	ReadHeaderTimeout, ReadTimeout, IdleTimeout time.Duration
	// The admission settings bound what requests hold before they are
	// authenticated.
	//
	// BodyBudget is the memory, in bytes, that the bodies of the requests
	// in hand may hold at once, from their first byte read to their
	// answer (default DefaultBodyBudget). A request whose declared
	// length does not fit in what is left is answered 503 with Retry-After
	// before its body is read; one that outgrows it while it is read, the
	// same.
	BodyBudget int64
	// MinBodyRate is the slowest a body may arrive, on average, in bytes
	// per second, once it is BodyGrace behind (default
	// DefaultMinBodyRate).
	MinBodyRate int
	// BodyGrace is how far behind MinBodyRate a body may fall (default
	// DefaultBodyGrace); BodyStall is the longest a body may pause
	// between two reads (default DefaultBodyStall). A body cut by
	// either is answered 408.
	BodyGrace, BodyStall time.Duration
	// Now is the clock of timestamp checks (nil: time.Now).
	Now func() time.Time
	// Pipeline configures batching, mapping and writes.
	Pipeline ingest.PipelineConfig

	// handOff is the hand-off to the local workers the Inboxd gives
	// the source when it opens it (source.Env.HandOff); nil: none.
	handOff handoff.HandOff
}

// adm is c's admission settings.
func (c Config) adm() admission {
	return admission{BodyBudget: c.BodyBudget, MinBodyRate: c.MinBodyRate, BodyGrace: c.BodyGrace, BodyStall: c.BodyStall}
}

func (c Config) withDefaults() Config {
	c.Pipeline = ingestcore.PipelineDefaults(c.Pipeline)
	setDur := func(d *time.Duration, def time.Duration) {
		if *d == 0 {
			*d = def
		}
	}
	setDur(&c.WriteTimeout, DefaultWriteTimeout)
	setDur(&c.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	setDur(&c.ReadTimeout, DefaultReadTimeout)
	setDur(&c.IdleTimeout, DefaultIdleTimeout)
	if c.MaxRequests == 0 {
		c.MaxRequests = DefaultMaxRequests
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	a := c.adm().withDefaults()
	c.BodyBudget, c.MinBodyRate, c.BodyGrace, c.BodyStall = a.BodyBudget, a.MinBodyRate, a.BodyGrace, a.BodyStall
	c.Sources = append([]SourceConfig(nil), c.Sources...)
	for i := range c.Sources {
		c.Sources[i] = c.Sources[i].withDefaults()
	}
	return c
}

// withDefaults fills the scheme's defaults: Standard Webhooks takes its id
// from webhook-id (the signed id, svix-id in Svix's family) and its type
// from the JSON field type; GitHub its id from the hash of the body (its
// payloads carry no id of the delivery, and X-GitHub-Delivery is not
// signed) and its type from X-GitHub-Event (not signed either: the
// source must allow it, UnsignedType).
func (s SourceConfig) withDefaults() SourceConfig {
	switch s.Verify {
	case Standard:
		if !s.EventID.set() {
			s.EventID = Field{Header: "webhook-id"}
		}
		if !s.EventType.set() {
			s.EventType = Field{JSON: "type"}
		}
	case GitHub:
		if !s.EventID.set() {
			s.EventID = Field{Body: BodySHA256}
		}
		if !s.EventType.set() {
			s.EventType = Field{Header: "X-GitHub-Event"}
		}
	}
	if s.MaxBody == 0 {
		s.MaxBody = DefaultMaxBody
	}
	return s
}

// webhookName is what a source's name may be: it is a path segment and a
// metric label.
var webhookName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// validate reports every setting that cannot work, one line each; it never
// repeats a secret.
func (c Config) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.Addr == "" {
		bad("ingest: no webhook listener address (INBOXD_WEBHOOK_ADDR)")
	}
	if len(c.Sources) == 0 {
		bad("ingest: no webhook sources (INBOXD_WEBHOOK_SOURCES)")
	}
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		bad("ingest: INBOXD_WEBHOOK_TLS_CERT_FILE and INBOXD_WEBHOOK_TLS_KEY_FILE must be set together")
	}
	if c.WriteTimeout <= 0 {
		bad("ingest: the webhook write timeout must be positive, got %s", c.WriteTimeout)
	}
	if c.MaxRequests < 1 {
		bad("ingest: the webhook request cap must be at least 1, got %d", c.MaxRequests)
	}
	largest := 0
	for _, s := range c.Sources {
		largest = max(largest, s.MaxBody)
	}
	for _, e := range c.adm().problems(largest) {
		bad("ingest: %s", e)
	}
	seen := map[string]bool{}
	for i, s := range c.Sources {
		for _, e := range s.problems() {
			bad("ingest: webhook source %d (%s): %s", i+1, s.Name, e)
		}
		if seen[s.Name] {
			bad("ingest: webhook source %d: name %q is used twice", i+1, s.Name)
		}
		seen[s.Name] = true
	}
	if c.Pipeline.BatchSize < 1 {
		bad("ingest: batch size must be at least 1, got %d", c.Pipeline.BatchSize)
	}
	if c.Pipeline.BatchBytes < 1 {
		bad("ingest: batch bytes must be at least 1, got %d", c.Pipeline.BatchBytes)
	}
	return errors.Join(errs...)
}

// problems lists what is wrong with s (its defaults applied).
func (s SourceConfig) problems() []string {
	var out []string
	if !webhookName.MatchString(s.Name) {
		out = append(out, "name: must be 1 to 128 letters, digits, '.', '_' or '-', starting with a letter or digit")
	}
	switch s.Verify {
	case Standard, GitHub, HMAC:
		if len(s.Secrets) == 0 {
			out = append(out, "secret_file: holds no secret")
		}
	case None:
		if len(s.Secrets) > 0 {
			out = append(out, "secret_file: verify none uses no secret")
		}
	case "":
		out = append(out, "verify: is required (standard-webhooks, hmac-sha256, github or none)")
	default:
		out = append(out, fmt.Sprintf("verify: must be standard-webhooks, hmac-sha256, github or none, got %q", s.Verify))
	}
	if s.Verify == Standard {
		for i, sec := range s.Secrets {
			if _, err := standardSecret(sec); err != nil {
				out = append(out, fmt.Sprintf("secret_file: secret %d: %v", i+1, err))
			}
		}
	}
	if s.Verify == HMAC {
		if s.Header == "" {
			out = append(out, "header: is required with verify hmac-sha256")
		}
	} else if s.Header != "" || s.Prefix != "" {
		out = append(out, "header, prefix: only with verify hmac-sha256")
	}
	check := func(name string, f Field, required bool) {
		n := 0
		for _, v := range []string{f.Header, f.JSON, f.Value, f.Body} {
			if v != "" {
				n++
			}
		}
		forms := map[string]string{"event_id": "{header: X}, {json: field} or {body: sha256}",
			"event_type": "{header: X}, {json: field} or {value: v}", "key": "{header: X} or {json: field}"}[name]
		switch {
		case n == 0 && required:
			out = append(out, name+": is required ("+forms+")")
		case n > 1:
			out = append(out, name+": give one of "+forms)
		case f.Value != "" && name != "event_type":
			out = append(out, name+": value is only for event_type")
		case f.Value != "" && ingestcore.CheckIdentifier([]byte(f.Value)) != "":
			out = append(out, name+": value: "+ingestcore.CheckIdentifier([]byte(f.Value)))
		case f.Body != "" && name != "event_id":
			out = append(out, name+": body is only for event_id")
		case f.Body != "" && f.Body != BodySHA256:
			out = append(out, fmt.Sprintf("%s: body: must be %s, got %q", name, BodySHA256, f.Body))
		}
	}
	check("event_id", s.EventID, true)
	check("event_type", s.EventType, true)
	check("key", s.Key, false)
	out = append(out, s.unsignedProblems()...)
	switch {
	case s.ReplayWindow < 0 || s.ReplayWindow > MaxReplayWindow:
		out = append(out, fmt.Sprintf("replay_window: must be between 1s and %s, got %s", MaxReplayWindow, s.ReplayWindow))
	case s.ReplayWindow > 0 && s.Verify != GitHub && s.Verify != HMAC:
		out = append(out, "replay_window: only with verify github or hmac-sha256, whose signatures carry no timestamp")
	}
	for _, h := range s.KeepHeaders {
		switch lh := strings.ToLower(h); {
		case slices.ContainsFunc(signatureHeaders(s), func(sig string) bool { return strings.EqualFold(sig, h) }):
			out = append(out, fmt.Sprintf("keep_headers: %s carries the signature, which is never stored", h))
		case slices.Contains(hopByHopHeaders, lh):
			out = append(out, fmt.Sprintf("keep_headers: %s is a hop-by-hop header, never stored", h))
		case !sensitive.CredentialHeader(h):
			out = append(out, fmt.Sprintf("keep_headers: %s does not look like a credential: it is stored anyway", h))
		}
	}
	if s.MaxBody < 1 || s.MaxBody > MaxMaxBody {
		out = append(out, fmt.Sprintf("max_body: must be between 1 byte and 64MiB, got %d", s.MaxBody))
	}
	return out
}

// unsignedProblems lists the event id, type and key that s takes from a
// header its scheme does not sign without allowing it, and the allowances
// that allow nothing.
func (s SourceConfig) unsignedProblems() []string {
	var out []string
	signs := map[string]string{Standard: "webhook-id, webhook-timestamp and the body",
		GitHub: "the body alone", HMAC: "the body alone"}[s.Verify]
	for _, u := range []struct {
		field, option, what, instead string
		f                            Field
		allowed                      bool
	}{
		{"event_id", "unsigned_id", "event id", "{json: field} or {body: sha256}", s.EventID, s.UnsignedID},
		{"event_type", "unsigned_type", "event type", "{json: field} or {value: v}", s.EventType, s.UnsignedType},
		{"key", "unsigned_key", "key", "{json: field}", s.Key, s.UnsignedKey},
	} {
		unsigned := u.f.Header != "" && !schemeSigns(s.Verify, u.f.Header)
		switch {
		case s.Verify == None && u.allowed:
			out = append(out, u.option+": verify none signs nothing: there is nothing to allow")
		case signs == "":
		case unsigned && !u.allowed:
			out = append(out, fmt.Sprintf("%s: header %s is not signed (%s signs %s): anyone holding one signed request can send its body "+
				"again with another %s; take it from %s, or say %s: allow", u.field, u.f.Header, s.Verify, signs, u.what, u.instead, u.option))
		case u.allowed && !unsigned:
			out = append(out, fmt.Sprintf("%s: allow, but %s is not taken from an unsigned header", u.option, u.field))
		}
	}
	return out
}

// standardSecret decodes a Standard Webhooks secret: standard base64,
// padded or not, optionally after whsec_. That is what the reference
// libraries accept (standardwebhooks and svix for Node.js strip an optional
// whsec_ and decode the rest with @stablelib/base64, which takes base64
// with or without its padding), and the key is the one they derive. A
// length that leaves a single character over is refused: no byte is made
// of it, and the libraries disagree on it (the Node.js one drops the
// character, Go's and Python's fail).
func standardSecret(s string) ([]byte, error) {
	b64 := strings.TrimPrefix(s, "whsec_")
	raw := strings.TrimRight(b64, "=")
	key, err := base64.RawStdEncoding.DecodeString(raw)
	if err != nil || len(key) == 0 || len(b64)-len(raw) > 2 {
		return nil, errors.New("a standard-webhooks secret is base64 (padded or not), optionally after whsec_")
	}
	return key, nil
}

// tlsConfig is the listener's TLS configuration; nil without a
// certificate.
func (c Config) tlsConfig() (*tls.Config, error) {
	if c.TLSCertFile == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(c.TLSCertFile, c.TLSKeyFile)
	if err != nil {
		return nil, errors.New("ingest: INBOXD_WEBHOOK_TLS_CERT_FILE / _KEY_FILE: cannot load the certificate and key")
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}
