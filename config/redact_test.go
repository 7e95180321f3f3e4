package config

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The reported case: an unescaped "@" in the password. pgx (like libpq) ends
// the userinfo at the first "@", so the password became "p" and the host
// "ssw0rd-Secret@127.0.0.1", which the "starting" log line and every
// connection error then printed.
func TestUnescapedAtInPasswordIsRefusedAndNeverShown(t *testing.T) {
	t.Parallel()
	const raw = "postgres://inboxd:p@ssw0rd-Secret@127.0.0.1:5432/db"
	_, err := Load([]string{"INBOXD_DATABASE_URL=" + raw})
	if err == nil {
		t.Fatal("Load accepted a URL whose password contains an unescaped @")
	}
	msg := err.Error()
	if strings.Contains(msg, "ssw0rd") || strings.Contains(msg, "Secret") {
		t.Fatalf("error shows part of the password: %q", msg)
	}
	if !strings.HasPrefix(msg, "INBOXD_DATABASE_URL: ") || strings.Contains(msg, "\n") || !strings.Contains(msg, "%40") {
		t.Fatalf("want one line naming INBOXD_DATABASE_URL and telling to use %%40, got %q", msg)
	}
	if got := RedactURL(raw); strings.Contains(got, "ssw0rd") || strings.Contains(got, "Secret") {
		t.Fatalf("RedactURL(%q) = %q shows part of the password", raw, got)
	}
	if got := (Config{DatabaseURL: raw}).Redacted(); strings.Contains(got, "ssw0rd") {
		t.Fatalf("Redacted() = %q shows part of the password", got)
	}
}

// vocabulary is the fixed text Validate and RedactURL may print about a
// connection string: four bytes of a password that also occur here are not a
// leak (a password "password1" shares "pass" with every message that says
// "password").
func vocabulary() string {
	var b strings.Builder
	for _, e := range []error{errMoreThanOneAt, errAtAfterSlash, errQueryName, errQueryAfterPW, errKVName, errKVAfterPW} {
		b.WriteString(e.Error() + "\x00")
	}
	for k := range knownKeys {
		b.WriteString(errTwice(k, true).Error() + "\x00" + errTwice(k, false).Error() + "\x00")
	}
	b.WriteString(errTwice("?", true).Error() + "\x00" + errTwice("?", false).Error() + "\x00")
	b.WriteString("INBOXD_DATABASE_URL: is not a valid PostgreSQL connection string\x00(invalid)\x00postgres://\x00")
	return b.String()
}

var vocab = vocabulary()

// leaks returns a 4-byte piece of secret found in out that is neither in the
// input outside the secret (nonSecret) nor in the fixed vocabulary, or "".
func leaks(out, nonSecret string, secrets ...string) string {
	for _, secret := range secrets {
		for i := 0; i+4 <= len(secret); i++ {
			w := secret[i : i+4]
			if strings.Contains(out, w) && !strings.Contains(nonSecret, w) && !strings.Contains(vocab, w) {
				return w
			}
		}
	}
	return ""
}

// secretForms returns the raw secret and its URL- and backslash-decoded
// forms.
func secretForms(raw string) []string {
	forms := []string{raw}
	if d, err := url.PathUnescape(raw); err == nil {
		forms = append(forms, d)
	}
	return append(forms, strings.NewReplacer(`\\`, `\`, `\'`, `'`).Replace(raw))
}

func TestConnectionStringShapes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		in     string
		secret string // as written in the input: no 4-byte piece of it (or of its decoded form) may be printed
		// ok: Validate accepts it and RedactURL gives want. Otherwise Validate
		// refuses it with an error containing want, and RedactURL gives
		// "(invalid)".
		ok   bool
		want string
	}{
		{"two @ in the password", "postgres://u:a@b@c@h/db", "a@b@c", false, "%40"},
		{"the reported URL", "postgres://inboxd:p@ssw0rd-Secret@127.0.0.1:5432/db", "p@ssw0rd-Secret", false, `more than one "@"`},
		{"@ in the user name", "postgres://me@corp:pw12@h/db", "pw12", false, "%40"},
		{"colon in the password", "postgres://u:pa:ss@h/db", "pa:ss", true, "postgres://u@h:5432/db"},
		{"percent-encoded @", "postgresql://u:p%40ss@h/db", "p%40ss", true, "postgres://u@h:5432/db"},
		{"percent-encoded @ and others", "postgres://u:p%40s%2Fs%3Fw%26rd@h:6543/app?sslmode=disable", "p%40s%2Fs%3Fw%26rd", true, "postgres://u@h:6543/app"},
		{"slash in the password", "postgres://u:12/secret@h/db", "secret", false, "%2F"},
		{"question mark in the password", "postgres://u:pa?s3cretX@h/db", "pa?s3cretX", false, "%3F"},
		{"@ in a query password", "postgres://h?password=sec@ret", "sec@ret", false, "%40"},
		{"@ in a query password after the path", "postgres://u@h/db?password=sec@ret", "sec@ret", false, "%40"},
		{"& in a query password", "postgres://u@h/db?password=ab&cdef=x", "ab&cdef", false, "%26"},
		{"query password", "postgres://u@h/db?password=s3cr3t&sslmode=disable", "s3cr3t", true, "postgres://u@h:5432/db"},
		{"query password twice", "postgres://u:first1@h/db?password=second2", "second2", false, "password twice"},
		{"host twice", "postgres://u@h:5432/db?password=ab&host=evil", "ab&host=evil", false, "host twice"},
		{"missing host", "postgres://u:s3cret@/db", "s3cret", true, "postgres://u@"},
		{"no user (pgx uses the OS user)", "postgres://:s3cret@h/db", "s3cret", true, "@h:5432/db"},
		{"IPv6 host", "postgres://u:s3cret@[::1]:5433/db", "s3cret", true, "postgres://u@[::1]:5433/db"},
		{"IPv6 host without port", "postgres://u:s3cret@[fe80::1]/db", "s3cret", true, "postgres://u@[fe80::1]:5432/db"},
		{"unterminated IPv6 host", "postgres://u:s3cret@[::1/db", "s3cret", false, "not a valid"},
		{"port only, socket in the query", "postgres://u:s3cret@:5433/db?host=/tmp", "s3cret", true, "postgres://u@:5433/db?host=%2Ftmp"},
		{"port twice", "postgres://u@h:5432/db?password=abcd&port=6543", "abcd&port=6543", false, "port twice"},
		{"several hosts", "postgres://u:s3cret@h1:5432,h2:5433/db", "s3cret", true, "postgres://u@h1:5432,h2:5433/db"},
		{"bad port", "postgres://u:hunter2@h:badport/db", "hunter2", false, "not a valid"},
		{"upper-case scheme", "POSTGRES://u:hunter2@h/db?sslmode=disable", "hunter2", false, "parameter name"},
		{"kv quoted password with spaces", "host=h user=u password='se cr\\'et' dbname=app", `se cr\'et`, true, "postgres://u@h:5432/app"},
		{"kv quoted password with escaped quote", `host=h password='it\'s s3cret' user=u`, `it\'s s3cret`, true, "postgres://u@h:5432/"},
		{"kv unquoted password", "host=h user=u password=s3cret dbname=app", "s3cret", true, "postgres://u@h:5432/app"},
		{"kv unquoted password with a space", "host=h user=u password=s3c ret=x dbname=app", "s3c ret=x", false, "quote the password"},
		{"kv password with a space, then a keyword", "host=h user=u password=ab cd host=h2", "ab cd", false, "not a valid"},
		{"kv password spelling a duplicate host", "host=h user=u password=ab host=evil", "ab host=evil", false, "host twice"},
		{"kv quote inside a quoted password", "host=h user=u password='ab'cdef=x' dbname=app", "ab'cdef=x", false, "quote the password"},
		{"kv unterminated quote", "host=h user=u password='abcdef dbname=app", "abcdef", false, "not a valid"},
		{"kv sslpassword", "host=h user=u sslpassword=abcd efgh=1", "abcd efgh", false, "quote the password"},
		{"kv password spelling a keyword in another case", "host=h port=5432 user=u dbname=d password=0 hOst= sslmode=disable", "0 hOst=", false, "quote the password"},
		{"query password spelling a keyword in another case", "postgres://u@h/db?password=ab&Host=evil", "ab&Host=evil", false, "%26"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			verr := Config{DatabaseURL: tt.in}.Validate()
			var dbErr string
			if verr != nil {
				for _, l := range strings.Split(verr.Error(), "\n") {
					if strings.HasPrefix(l, "INBOXD_DATABASE_URL") {
						dbErr = l
					}
				}
			}
			red := RedactURL(tt.in)
			if tt.ok {
				if dbErr != "" {
					t.Fatalf("Validate refused %q: %s", tt.in, dbErr)
				}
				if !strings.Contains(red, tt.want) {
					t.Fatalf("RedactURL(%q) = %q, want it to contain %q", tt.in, red, tt.want)
				}
			} else {
				if dbErr == "" {
					t.Fatalf("Validate accepted %q", tt.in)
				}
				if !strings.Contains(dbErr, tt.want) {
					t.Fatalf("error %q does not contain %q", dbErr, tt.want)
				}
				if red != "(invalid)" {
					t.Fatalf("RedactURL(%q) = %q, want (invalid)", tt.in, red)
				}
			}
			if !strings.Contains(tt.in, tt.secret) {
				t.Fatalf("bad test: %q not in %q", tt.secret, tt.in)
			}
			nonSecret := strings.Replace(tt.in, tt.secret, "\x00", 1)
			if p := leaks(dbErr, nonSecret, secretForms(tt.secret)...); p != "" {
				t.Fatalf("error %q shows %q of the password", dbErr, p)
			}
			if p := leaks(red, nonSecret, secretForms(tt.secret)...); p != "" {
				t.Fatalf("RedactURL = %q shows %q of the password", red, p)
			}
		})
	}
}

// A mislaid connection string (or password) in a *_FILE variable must not be
// echoed by the "cannot read" error.
func TestSecretFileErrorsDoNotEchoTheValue(t *testing.T) {
	t.Parallel()
	_, err := Load([]string{"INBOXD_DATABASE_URL_FILE=postgres://u:hunter22@h/db"})
	if err == nil || !strings.HasPrefix(err.Error(), "INBOXD_DATABASE_URL_FILE: cannot read") || strings.Contains(err.Error(), "hunter22") {
		t.Fatalf("got %v", err)
	}
	_, err = Load([]string{dsn, "INBOXD_KAFKA_SASL_MECHANISM=PLAIN", "INBOXD_KAFKA_SASL_USERNAME=u",
		"INBOXD_KAFKA_SASL_PASSWORD_FILE=kafka-pass-word"})
	if err == nil || !strings.HasPrefix(err.Error(), "INBOXD_KAFKA_SASL_PASSWORD_FILE: cannot read") || strings.Contains(err.Error(), "pass-word") {
		t.Fatalf("got %v", err)
	}
	// A connection string read from a file is checked like the variable.
	f := filepath.Join(t.TempDir(), "url")
	if err := os.WriteFile(f, []byte("postgres://u:p@ssw0rd-Secret@h/db\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Load([]string{"INBOXD_DATABASE_URL_FILE=" + f})
	if err == nil || strings.Contains(err.Error(), "ssw0rd") || !strings.Contains(err.Error(), "%40") {
		t.Fatalf("got %v", err)
	}
}

// The Kafka SASL password never appears in Redacted, in validation errors,
// or when the configuration is printed with %v, %+v or %#v.
func TestKafkaSASLPasswordNeverShown(t *testing.T) {
	t.Parallel()
	const pw = "kafka-s3cret-pw"
	c, err := Load([]string{dsn, "INBOXD_KAFKA_BROKERS=k:9092", "INBOXD_KAFKA_TOPICS=t",
		"INBOXD_KAFKA_SASL_MECHANISM=SCRAM-SHA-512", "INBOXD_KAFKA_SASL_USERNAME=svc",
		"INBOXD_KAFKA_SASL_PASSWORD=" + pw})
	if err != nil {
		t.Fatal(err)
	}
	if c.KafkaSASLPassword != pw {
		t.Fatal("password not loaded")
	}
	out := c.Redacted() + fmt.Sprintf(" %v %+v %#v %s", c, c, c, c)
	if strings.Contains(out, pw) || strings.Contains(out, "s3cret") {
		t.Fatalf("SASL or database password printed: %s", out)
	}
	if !strings.Contains(fmt.Sprintf("%+v", c), "KafkaSASLUsername:svc") {
		t.Fatalf("%%+v should still show the non-secret settings: %+v", c)
	}
	_, err = Load([]string{dsn, "INBOXD_KAFKA_SASL_MECHANISM=GSSAPI", "INBOXD_KAFKA_SASL_PASSWORD=" + pw, "INBOXD_WORKERS=0"})
	if err == nil || strings.Contains(err.Error(), pw) {
		t.Fatalf("got %v", err)
	}
}
