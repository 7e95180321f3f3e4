// Package webhookfile reads the webhook sources file (INBOXD_WEBHOOK_SOURCES)
// and the secret files it names into the webhook source's settings
// (ingest/webhook.SourceConfig), as strictly as the routes file: the
// daemon's file, read by the daemon (cmd/inboxd/app); the rules each
// source is checked by are the webhook source's own.
package webhookfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/inboxd/inboxd/ingest/webhook"
	"github.com/inboxd/inboxd/internal/opfiles"
)

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

func (f *webhookFileField) field() webhook.Field {
	if f == nil {
		return webhook.Field{}
	}
	return webhook.Field(*f)
}

// checkSource is s with its defaults and its problems, by the webhook
// source's own rules (webhook.New's source answers CheckSource).
func checkSource(s webhook.SourceConfig) (webhook.SourceConfig, []string) {
	c, ok := webhook.New(webhook.Config{}).(interface {
		CheckSource(webhook.SourceConfig) (webhook.SourceConfig, []string)
	})
	if !ok {
		panic("webhookfile: the webhook source checks no source") // a build that lost the method
	}
	return c.CheckSource(s)
}

// Limits of the files read.
const (
	// MaxSourcesFileBytes is the largest webhook sources file accepted, in
	// bytes (as MaxRoutesFileBytes for the routes file).
	MaxSourcesFileBytes = 1 << 20
	// maxSecretFileBytes is the largest secret file read.
	maxSecretFileBytes = 64 << 10
)

// Load reads the webhook sources file at path and, with secrets,
// the secret files it names. Without them it reads the sources' mapping
// rules alone, enough to map a stored row again (the source's remap
// rule), not to verify a request; the file is checked as it is with
// them, secrets aside. Errors name the file and the source, one line
// each; they never hold a secret.
func Load(path string, secrets bool) ([]webhook.SourceConfig, error) {
	if !secrets {
		return loadWebhookSources(path, nil)
	}
	return loadWebhookSources(path, readSecretFile)
}

// readSecretFile reads a secret file through the operator files' capped
// reader: one of more than maxSecretFileBytes is never read whole.
func readSecretFile(path string) ([]byte, error) { return opfiles.Read(path, maxSecretFileBytes) }

func loadWebhookSources(path string, readFile func(string) ([]byte, error)) ([]webhook.SourceConfig, error) {
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
func parseWebhookSources(name string, data []byte, readFile func(string) ([]byte, error)) ([]webhook.SourceConfig, error) {
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
	out := make([]webhook.SourceConfig, 0, len(f.Sources))
	for i, fs := range f.Sources {
		s := webhook.SourceConfig{Name: fs.Name, Verify: fs.Verify, Header: fs.Header, Prefix: fs.Prefix,
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
		case len(files) == 0 && fs.Verify != webhook.None && fs.Verify != "":
			bad("%s: secret_file: is required with verify %s", where, fs.Verify)
		case len(files) > 0 && fs.Verify == webhook.None:
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
		s, problems := checkSource(s)
		for _, p := range problems {
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
	if err != nil || n < 0 || n > webhook.MaxMaxBody/mult+1 {
		return 0, fmt.Errorf("%q is not a size (a number of bytes, or with KiB, MiB, KB, MB)", s)
	}
	return n * mult, nil
}
