package ingest

import (
	"bytes"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// SourceWebhook is the source kind of the webhook source (WebhookSource):
// the source_kind label of its ingest metrics and readiness.
const SourceWebhook = "webhook"

// The verification schemes of a webhook source (its verify field).
const (
	// WebhookStandard is the Standard Webhooks specification: headers
	// webhook-id, webhook-timestamp and webhook-signature, secrets
	// whsec_<base64>.
	WebhookStandard = "standard-webhooks"
	// WebhookHMAC is an HMAC-SHA256 of the body, hex or base64, in a named
	// header after an optional prefix.
	WebhookHMAC = "hmac-sha256"
	// WebhookGitHub is GitHub's scheme: X-Hub-Signature-256 = sha256=<hex>.
	WebhookGitHub = "github"
	// WebhookNone verifies nothing; it must be stated.
	WebhookNone = "none"
)

// Limits of the webhook configuration.
const (
	// MaxWebhookSourcesFileBytes is the largest webhook sources file
	// accepted, in bytes (as MaxRoutesFileBytes for the routes file).
	MaxWebhookSourcesFileBytes = 1 << 20
	// maxSecretFileBytes is the largest secret file read.
	maxSecretFileBytes = 64 << 10
	// DefaultWebhookMaxBody is a source's max_body when none is given.
	DefaultWebhookMaxBody = 1 << 20
	// maxWebhookMaxBody caps max_body: a body is held in memory until its
	// batch commits.
	maxWebhookMaxBody = 64 << 20
	// WebhookTolerance is how far a Standard Webhooks timestamp may be from
	// the clock, either way, before the request is refused (replays).
	WebhookTolerance = 5 * time.Minute
)

// Defaults of WebhookConfig.
const (
	// DefaultWebhookWriteTimeout bounds how long a request waits for the
	// commit of its batch before it is answered 503.
	DefaultWebhookWriteTimeout = 10 * time.Second
	// DefaultWebhookMaxRequests caps the requests served at once; more are
	// answered 503 at once.
	DefaultWebhookMaxRequests = 1024
	// DefaultWebhookReadHeaderTimeout bounds reading a request's headers.
	DefaultWebhookReadHeaderTimeout = 10 * time.Second
	// DefaultWebhookReadTimeout bounds reading a whole request, body
	// included (slow clients).
	DefaultWebhookReadTimeout = 30 * time.Second
	// DefaultWebhookIdleTimeout closes a kept-alive connection idle this
	// long.
	DefaultWebhookIdleTimeout = 60 * time.Second
)

// WebhookField says where a webhook request carries a value: a header, a
// top-level field of its JSON body, or (event type only) a fixed value.
// Exactly one is set.
type WebhookField struct {
	// Header is the header's name (case does not matter).
	Header string
	// JSON is a top-level field of the JSON object body.
	JSON string
	// Value is a literal (event_type only).
	Value string
}

// set reports whether f says anything.
func (f WebhookField) set() bool { return f.Header != "" || f.JSON != "" || f.Value != "" }

// WebhookSourceConfig is one source of the webhook sources file: POST
// /webhooks/<Name>, verified by Verify, rows with source Name.
type WebhookSourceConfig struct {
	// Name is the path segment and the rows' source.
	Name string
	// Verify is WebhookStandard, WebhookHMAC, WebhookGitHub or WebhookNone.
	Verify string
	// Secrets are the secrets accepted (several during a rotation), as
	// the secret file holds them: one per line. Standard Webhooks secrets
	// are whsec_<base64>; the others are used as they are.
	Secrets []string
	// Header and Prefix (WebhookHMAC) name the signature's header and what
	// comes before the MAC in it ("sha256=").
	Header, Prefix string
	// EventID, EventType and Key say where the id, the type and the key
	// (optional) are; see WebhookField.
	EventID, EventType, Key WebhookField
	// MaxBody is the largest body accepted, in bytes (default
	// DefaultWebhookMaxBody); a bigger one is answered 413.
	MaxBody int
}

// WebhookConfig configures the webhook source: an HTTP listener of its
// own, receiving signed webhooks into the inbox through the
// persist-then-ack pipeline.
type WebhookConfig struct {
	// Addr is the listener's address (host:port).
	Addr string
	// Sources are the webhook sources, each under /webhooks/<name>.
	Sources []WebhookSourceConfig
	// TLSCertFile and TLSKeyFile, set together, serve HTTPS.
	TLSCertFile, TLSKeyFile string
	// WriteTimeout bounds a request's wait for its batch's commit (default
	// DefaultWebhookWriteTimeout); after it the request is answered 503.
	WriteTimeout time.Duration
	// MaxRequests caps the requests served at once (default
	// DefaultWebhookMaxRequests).
	MaxRequests int
	// ReadHeaderTimeout, ReadTimeout and IdleTimeout are the server's
	// (defaults DefaultWebhookReadHeaderTimeout, DefaultWebhookReadTimeout,
	// DefaultWebhookIdleTimeout).
	ReadHeaderTimeout, ReadTimeout, IdleTimeout time.Duration
	// Admission bounds what requests hold before they are authenticated.
	Admission WebhookAdmission
	// Now is the clock of timestamp checks (nil: time.Now).
	Now func() time.Time
	// Pipeline configures batching, mapping and writes.
	Pipeline PipelineConfig
}

func (c WebhookConfig) withDefaults() WebhookConfig {
	c.Pipeline = c.Pipeline.withDefaults()
	setDur := func(d *time.Duration, def time.Duration) {
		if *d == 0 {
			*d = def
		}
	}
	setDur(&c.WriteTimeout, DefaultWebhookWriteTimeout)
	setDur(&c.ReadHeaderTimeout, DefaultWebhookReadHeaderTimeout)
	setDur(&c.ReadTimeout, DefaultWebhookReadTimeout)
	setDur(&c.IdleTimeout, DefaultWebhookIdleTimeout)
	if c.MaxRequests == 0 {
		c.MaxRequests = DefaultWebhookMaxRequests
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	c.Admission = c.Admission.withDefaults()
	c.Sources = append([]WebhookSourceConfig(nil), c.Sources...)
	for i := range c.Sources {
		c.Sources[i] = c.Sources[i].withDefaults()
	}
	return c
}

// withDefaults fills the scheme's defaults: Standard Webhooks takes its id
// from webhook-id and its type from the JSON field type; GitHub its id
// from X-GitHub-Delivery and its type from X-GitHub-Event.
func (s WebhookSourceConfig) withDefaults() WebhookSourceConfig {
	switch s.Verify {
	case WebhookStandard:
		if !s.EventID.set() {
			s.EventID = WebhookField{Header: "webhook-id"}
		}
		if !s.EventType.set() {
			s.EventType = WebhookField{JSON: "type"}
		}
	case WebhookGitHub:
		if !s.EventID.set() {
			s.EventID = WebhookField{Header: "X-GitHub-Delivery"}
		}
		if !s.EventType.set() {
			s.EventType = WebhookField{Header: "X-GitHub-Event"}
		}
	}
	if s.MaxBody == 0 {
		s.MaxBody = DefaultWebhookMaxBody
	}
	return s
}

// webhookName is what a source's name may be: it is a path segment and a
// metric label.
var webhookName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// Validate reports every setting that cannot work, one line each; it never
// repeats a secret.
func (c WebhookConfig) Validate() error {
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
	for _, e := range c.Admission.problems(largest) {
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
func (s WebhookSourceConfig) problems() []string {
	var out []string
	if !webhookName.MatchString(s.Name) {
		out = append(out, "name: must be 1 to 128 letters, digits, '.', '_' or '-', starting with a letter or digit")
	}
	switch s.Verify {
	case WebhookStandard, WebhookGitHub, WebhookHMAC:
		if len(s.Secrets) == 0 {
			out = append(out, "secret_file: holds no secret")
		}
	case WebhookNone:
		if len(s.Secrets) > 0 {
			out = append(out, "secret_file: verify none uses no secret")
		}
	case "":
		out = append(out, "verify: is required (standard-webhooks, hmac-sha256, github or none)")
	default:
		out = append(out, fmt.Sprintf("verify: must be standard-webhooks, hmac-sha256, github or none, got %q", s.Verify))
	}
	if s.Verify == WebhookStandard {
		for i, sec := range s.Secrets {
			if _, err := standardSecret(sec); err != nil {
				out = append(out, fmt.Sprintf("secret_file: secret %d: %v", i+1, err))
			}
		}
	}
	if s.Verify == WebhookHMAC {
		if s.Header == "" {
			out = append(out, "header: is required with verify hmac-sha256")
		}
	} else if s.Header != "" || s.Prefix != "" {
		out = append(out, "header, prefix: only with verify hmac-sha256")
	}
	check := func(name string, f WebhookField, required, literal bool) {
		n := 0
		for _, v := range []string{f.Header, f.JSON, f.Value} {
			if v != "" {
				n++
			}
		}
		switch {
		case n == 0 && required:
			out = append(out, name+": is required ({header: X}, {json: field}"+map[bool]string{true: " or {value: v}"}[literal]+")")
		case n > 1:
			out = append(out, name+": give one of header, json"+map[bool]string{true: ", value"}[literal])
		case f.Value != "" && !literal:
			out = append(out, name+": value is only for event_type")
		case f.Value != "" && checkIdentifier([]byte(f.Value)) != "":
			out = append(out, name+": value: "+checkIdentifier([]byte(f.Value)))
		}
	}
	check("event_id", s.EventID, true, false)
	check("event_type", s.EventType, true, true)
	check("key", s.Key, false, false)
	if s.MaxBody < 1 || s.MaxBody > maxWebhookMaxBody {
		out = append(out, fmt.Sprintf("max_body: must be between 1 byte and 64MiB, got %d", s.MaxBody))
	}
	return out
}

// standardSecret decodes a Standard Webhooks secret, whsec_<base64>.
func standardSecret(s string) ([]byte, error) {
	b64, ok := strings.CutPrefix(s, "whsec_")
	if !ok {
		return nil, errors.New("a standard-webhooks secret starts with whsec_")
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(key) == 0 {
		return nil, errors.New("a standard-webhooks secret is whsec_ followed by base64")
	}
	return key, nil
}

// webhookFile is the webhook sources file as YAML.
type webhookFile struct {
	Sources []webhookFileSource `yaml:"sources"`
}

type webhookFileSource struct {
	Name       string            `yaml:"name"`
	Verify     string            `yaml:"verify"`
	SecretFile string            `yaml:"secret_file"`
	Header     string            `yaml:"header"`
	Prefix     string            `yaml:"prefix"`
	EventID    *webhookFileField `yaml:"event_id"`
	EventType  *webhookFileField `yaml:"event_type"`
	Key        *webhookFileField `yaml:"key"`
	MaxBody    string            `yaml:"max_body"`
}

type webhookFileField struct {
	Header string `yaml:"header"`
	JSON   string `yaml:"json"`
	Value  string `yaml:"value"`
}

func (f *webhookFileField) field() WebhookField {
	if f == nil {
		return WebhookField{}
	}
	return WebhookField(*f)
}

// LoadWebhookSources reads the webhook sources file at path and the
// secret files it names. Errors name the file and the source, one line
// each; they never hold a secret.
func LoadWebhookSources(path string) ([]WebhookSourceConfig, error) {
	data, err := readCapped(path, MaxWebhookSourcesFileBytes)
	if err != nil {
		return nil, fmt.Errorf("INBOXD_WEBHOOK_SOURCES: %w", err)
	}
	return ParseWebhookSources(path, data, os.ReadFile)
}

// readCapped reads the file at path, refusing one over limit bytes.
func readCapped(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: larger than the limit of %d bytes", path, limit)
	}
	return data, nil
}

// ParseWebhookSources parses a webhook sources file (name is used in
// errors) as strictly as the routes file: unknown fields, repeated keys,
// repeated names and bad values are errors, every one reported, one line
// each. readFile reads the secret files (nil: none are read and each
// source has no secret).
func ParseWebhookSources(name string, data []byte, readFile func(string) ([]byte, error)) ([]WebhookSourceConfig, error) {
	if len(data) > MaxWebhookSourcesFileBytes {
		return nil, fmt.Errorf("%s: file of %d bytes is larger than the limit of %d bytes", name, len(data), MaxWebhookSourcesFileBytes)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var f webhookFile
	if err := dec.Decode(&f); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: empty file: it needs a sources list", name)
		}
		return nil, yamlErrors(name, err)
	}
	var extra any
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: holds more than one YAML document", name)
	}
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{name}, args...)...))
	}
	if len(f.Sources) == 0 {
		bad("sources: the list is empty")
	}
	out := make([]WebhookSourceConfig, 0, len(f.Sources))
	for i, fs := range f.Sources {
		s := WebhookSourceConfig{Name: fs.Name, Verify: fs.Verify, Header: fs.Header, Prefix: fs.Prefix,
			EventID: fs.EventID.field(), EventType: fs.EventType.field(), Key: fs.Key.field()}
		where := fmt.Sprintf("source %d (%s)", i+1, fs.Name)
		if fs.MaxBody != "" {
			n, err := ParseByteSize(fs.MaxBody)
			if err != nil {
				bad("%s: max_body: %v", where, err)
			}
			s.MaxBody = n
		}
		switch {
		case fs.SecretFile == "" && fs.Verify != WebhookNone && fs.Verify != "":
			bad("%s: secret_file: is required with verify %s", where, fs.Verify)
		case fs.SecretFile != "" && readFile != nil:
			secrets, err := readSecrets(fs.SecretFile, readFile)
			if err != nil {
				bad("%s: secret_file: %v", where, err)
			}
			s.Secrets = secrets
			if fs.Verify == WebhookNone {
				bad("%s: secret_file: verify none uses no secret", where)
				s.Secrets = nil
			}
		}
		s = s.withDefaults()
		for _, p := range s.problems() {
			if strings.HasPrefix(p, "secret_file:") && (fs.SecretFile == "" || readFile == nil) {
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
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// yamlErrors turns a YAML decoding error into one line per problem, each
// after the file's name.
func yamlErrors(name string, err error) error {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		errs := make([]error, len(te.Errors))
		for i, e := range te.Errors {
			errs[i] = fmt.Errorf("%s: %s", name, e)
		}
		return errors.Join(errs...)
	}
	return fmt.Errorf("%s: %s", name, strings.TrimPrefix(err.Error(), "yaml: "))
}

// readSecrets reads a secret file: one secret a line, blank lines and
// lines starting with # skipped. Errors never quote the file's content.
func readSecrets(path string, readFile func(string) ([]byte, error)) ([]string, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read %s", path)
	}
	if len(data) > maxSecretFileBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxSecretFileBytes)
	}
	var out []string
	for line := range strings.Lines(string(data)) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		out = append(out, line)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s holds no secret", path)
	}
	return out, nil
}

// ParseByteSize parses a size in bytes: a number, optionally followed by
// B, KB, MB, KiB or MiB ("1MiB", "512KiB", "65536").
func ParseByteSize(s string) (int, error) {
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
func (c WebhookConfig) tlsConfig() (*tls.Config, error) {
	if c.TLSCertFile == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(c.TLSCertFile, c.TLSKeyFile)
	if err != nil {
		return nil, errors.New("ingest: INBOXD_WEBHOOK_TLS_CERT_FILE / _KEY_FILE: cannot load the certificate and key")
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}
