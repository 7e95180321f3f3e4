package webhook

import (
	"bytes"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/inboxd/inboxd/ingest"
	"github.com/inboxd/inboxd/internal/handoff"
	"github.com/inboxd/inboxd/internal/ingestcore"

	"gopkg.in/yaml.v3"

	"github.com/inboxd/inboxd/internal/opfiles"
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
	// MaxSourcesFileBytes is the largest webhook sources file
	// accepted, in bytes (as MaxRoutesFileBytes for the routes file).
	MaxSourcesFileBytes = 1 << 20
	// maxSecretFileBytes is the largest secret file read.
	maxSecretFileBytes = 64 << 10
	// DefaultMaxBody is a source's max_body when none is given.
	DefaultMaxBody = 1 << 20
	// maxWebhookMaxBody caps max_body: a body is held in memory until its
	// batch commits.
	maxWebhookMaxBody = 64 << 20
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
	if s.MaxBody < 1 || s.MaxBody > maxWebhookMaxBody {
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

// webhookFile is the webhook sources file as YAML.
type webhookFile struct {
	Sources []webhookFileSource `yaml:"sources"`
}

type webhookFileSource struct {
	Name         string            `yaml:"name"`
	Verify       string            `yaml:"verify"`
	SecretFile   string            `yaml:"secret_file"`
	SecretFiles  []string          `yaml:"secret_files"`
	Header       string            `yaml:"header"`
	Prefix       string            `yaml:"prefix"`
	EventID      *webhookFileField `yaml:"event_id"`
	EventType    *webhookFileField `yaml:"event_type"`
	Key          *webhookFileField `yaml:"key"`
	UnsignedID   string            `yaml:"unsigned_id"`
	UnsignedType string            `yaml:"unsigned_type"`
	UnsignedKey  string            `yaml:"unsigned_key"`
	ReplayWindow string            `yaml:"replay_window"`
	KeepHeaders  []string          `yaml:"keep_headers"`
	MaxBody      string            `yaml:"max_body"`
}

type webhookFileField struct {
	Header string `yaml:"header"`
	JSON   string `yaml:"json"`
	Value  string `yaml:"value"`
	Body   string `yaml:"body"`
}

func (f *webhookFileField) field() Field {
	if f == nil {
		return Field{}
	}
	return Field(*f)
}

// LoadSources reads the webhook sources file at path and, with secrets,
// the secret files it names. Without them it reads the sources' mapping
// rules alone, enough to map a stored row again (the source's remap
// rule), not to verify a request; the file is checked as it is with
// them, secrets aside. Errors name the file and the source, one line
// each; they never hold a secret.
func LoadSources(path string, secrets bool) ([]SourceConfig, error) {
	if !secrets {
		return loadWebhookSources(path, nil)
	}
	return loadWebhookSources(path, readSecretFile)
}

// readSecretFile reads a secret file through the operator files' capped
// reader: one of more than maxSecretFileBytes is never read whole.
func readSecretFile(path string) ([]byte, error) { return opfiles.Read(path, maxSecretFileBytes) }

func loadWebhookSources(path string, readFile func(string) ([]byte, error)) ([]SourceConfig, error) {
	data, err := opfiles.Read(path, MaxSourcesFileBytes)
	if err != nil {
		return nil, fmt.Errorf("INBOXD_WEBHOOK_SOURCES: %w", err)
	}
	return parseWebhookSources(path, data, readFile)
}

// parseWebhookSources parses a webhook sources file (name is used in
// errors) as strictly as the routes file: unknown fields, repeated keys,
// repeated names and bad values are errors, every one reported, one line
// each. readFile reads the secret files (nil: none are read and each
// source has no secret).
func parseWebhookSources(name string, data []byte, readFile func(string) ([]byte, error)) ([]SourceConfig, error) {
	if len(data) > MaxSourcesFileBytes {
		return nil, opfiles.TooLarge(name, int64(len(data)), MaxSourcesFileBytes)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var f webhookFile
	if err := dec.Decode(&f); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, opfiles.Errorf(name, 0, "empty file: it needs a sources list")
		}
		return nil, opfiles.YAMLError(name, err)
	}
	var extra any
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, opfiles.Errorf(name, 0, "holds more than one YAML document")
	}
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, opfiles.Errorf(name, 0, format, args...))
	}
	if len(f.Sources) == 0 {
		bad("sources: the list is empty")
	}
	out := make([]SourceConfig, 0, len(f.Sources))
	for i, fs := range f.Sources {
		s := SourceConfig{Name: fs.Name, Verify: fs.Verify, Header: fs.Header, Prefix: fs.Prefix,
			EventID: fs.EventID.field(), EventType: fs.EventType.field(), Key: fs.Key.field(), KeepHeaders: fs.KeepHeaders}
		where := fmt.Sprintf("source %d (%s)", i+1, fs.Name)
		if fs.MaxBody != "" {
			n, err := parseByteSize(fs.MaxBody)
			if err != nil {
				bad("%s: max_body: %v", where, err)
			}
			s.MaxBody = n
		}
		for _, u := range []struct {
			name, value string
			to          *bool
		}{{"unsigned_id", fs.UnsignedID, &s.UnsignedID}, {"unsigned_type", fs.UnsignedType, &s.UnsignedType}, {"unsigned_key", fs.UnsignedKey, &s.UnsignedKey}} {
			switch u.value {
			case "", "refuse":
			case "allow":
				*u.to = true
			default:
				bad("%s: %s: must be allow or refuse, got %q", where, u.name, u.value)
			}
		}
		if fs.ReplayWindow != "" {
			d, err := time.ParseDuration(fs.ReplayWindow)
			if err != nil || d <= 0 {
				bad("%s: replay_window: %q is not a positive duration (24h, 30m)", where, fs.ReplayWindow)
			} else {
				s.ReplayWindow = d
			}
		}
		files, secretsBad := fs.SecretFiles, false
		if fs.SecretFile != "" {
			files = append([]string{fs.SecretFile}, files...)
		}
		switch {
		case fs.SecretFile != "" && len(fs.SecretFiles) > 0:
			bad("%s: secret_file, secret_files: give one of them", where)
		case len(files) == 0 && fs.Verify != None && fs.Verify != "":
			bad("%s: secret_file: is required with verify %s", where, fs.Verify)
		case len(files) > 0 && fs.Verify == None:
			bad("%s: secret_file: verify none uses no secret", where)
		case len(files) > 0 && readFile != nil:
			for _, f := range files {
				secrets, err := readSecrets(f, readFile)
				if err != nil {
					bad("%s: secret_file: %v", where, err)
					secretsBad = true
				}
				s.Secrets = append(s.Secrets, secrets...)
			}
		}
		s = s.withDefaults()
		for _, p := range s.problems() {
			if strings.HasPrefix(p, "secret_file:") && (len(files) == 0 || readFile == nil || (secretsBad && len(s.Secrets) == 0)) {
				continue // reported above, or not read
			}
			bad("%s: %s", where, p)
		}
		for _, prev := range out {
			if prev.Name == s.Name && s.Name != "" {
				bad("%s: name: %q is used by an earlier source", where, s.Name)
			}
		}
		out = append(out, s)
	}
	if len(errs) > 0 {
		return nil, opfiles.Join(name, errs)
	}
	return out, nil
}

// readSecrets reads a secret file: every line that is not blank is a
// secret, white space at its ends removed. There is no comment syntax, so
// a secret may start with any character, '#' included. A file of several
// secrets (a rotation) may not hold a line starting with '#': that was a
// comment in the format of earlier versions, and taking it for a secret
// would accept requests signed with the comment's text; it is an error,
// and a secret that starts with '#' goes alone in its file (secret_files
// lists several). Errors never quote the file's content.
func readSecrets(path string, readFile func(string) ([]byte, error)) ([]string, error) {
	data, err := readFile(path)
	if errors.Is(err, opfiles.ErrTooLarge) {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxSecretFileBytes)
	}
	if err != nil {
		return nil, fmt.Errorf("cannot read %s", path)
	}
	if len(data) > maxSecretFileBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxSecretFileBytes)
	}
	var out []string
	hashLine := 0
	n := 0
	for line := range strings.Lines(string(data)) {
		n++
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if strings.HasPrefix(line, "#") && hashLine == 0 {
			hashLine = n
		}
		out = append(out, line)
	}
	switch {
	case len(out) == 0:
		return nil, fmt.Errorf("%s holds no secret", path)
	case len(out) > 1 && hashLine > 0:
		return nil, fmt.Errorf("%s: line %d starts with '#', in a file of %d secrets: a secret file has no comments; "+
			"remove the line, or put a secret that starts with '#' alone in its file (secret_files lists several)", path, hashLine, len(out))
	}
	return out, nil
}

// parseByteSize parses a size in bytes: a number, optionally followed by
// B, KB, MB, KiB or MiB ("1MiB", "512KiB", "65536").
func parseByteSize(s string) (int, error) {
	t := strings.TrimSpace(s)
	units := []struct {
		suffix string
		mult   int
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"KB", 1000}, {"MB", 1000 * 1000}, {"B", 1}}
	mult := 1
	for _, u := range units {
		if rest, ok := strings.CutSuffix(t, u.suffix); ok {
			t, mult = strings.TrimSpace(rest), u.mult
			break
		}
	}
	n, err := strconv.Atoi(t)
	if err != nil || n < 0 || n > maxWebhookMaxBody/mult+1 {
		return 0, fmt.Errorf("%q is not a size (a number of bytes, or with KiB, MiB, KB, MB)", s)
	}
	return n * mult, nil
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
