package config

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

// How FuzzRedactURL builds a connection string from its parts.
const (
	// The password written as is, without escaping: the shapes operators get
	// wrong. Part of the password may end up elsewhere; what matters is that
	// it is never printed. The non-secret parts are reduced to plain names
	// and all of host, port, user and database are set, because a raw
	// password that spells " host=evil" or "&port=1234" where the string sets
	// no host or port is indistinguishable from a real setting (documented
	// in redact.go).
	modeURLUserinfoRaw = iota
	modeURLQueryRaw
	modeURLQueryNoPathRaw
	modeKVUnquotedRaw
	modeKVQuotedRaw
	modeKVPasswordFirstRaw
	// The password escaped correctly, any bytes in the other parts: the
	// output must not depend on the password at all.
	modeURLUserinfoEncoded
	modeURLQueryEncoded
	modeKVQuotedEscaped
	// The whole string is the fuzzer's: only "no panic" and "Validate and
	// RedactURL agree" can be checked.
	modeFree
	numModes
)

// FuzzRedactURL checks that for any connection string built around a
// password of at least 4 bytes, neither RedactURL nor Validate's error shows
// the password or any 4-byte piece of it that is not also in the non-secret
// parts of the input (or in the fixed text of the messages), nor does any
// field pgx parses that connection errors or the server may print (host,
// user, database, runtime parameter names) when Validate accepts; that Validate
// accepts exactly the strings RedactURL can show; and that RedactURL never
// panics.
func FuzzRedactURL(f *testing.F) {
	f.Add(uint8(modeURLUserinfoRaw), "inboxd", "p@ssw0rd-Secret", "127.0.0.1", "db", "")
	f.Add(uint8(modeURLUserinfoRaw), "u", "a@b@c", "h", "db", "")
	f.Add(uint8(modeURLUserinfoRaw), "u", "pa:ss", "h", "db", "")
	f.Add(uint8(modeURLUserinfoRaw), "u", "12/secret", "h", "db", "")
	f.Add(uint8(modeURLUserinfoRaw), "u", "pa?ssword", "h", "db", "")
	f.Add(uint8(modeURLQueryRaw), "u", "sec@ret", "h", "db", "")
	f.Add(uint8(modeURLQueryRaw), "u", "ab&cdef=x", "h", "db", "")
	f.Add(uint8(modeURLQueryRaw), "u", "ab&host=evil", "h", "db", "")
	f.Add(uint8(modeURLQueryNoPathRaw), "u", "sec@ret1", "h", "db", "")
	f.Add(uint8(modeKVUnquotedRaw), "u", "s3c ret=x", "h", "app", "")
	f.Add(uint8(modeKVUnquotedRaw), "u", "ab host=evil", "h", "app", "")
	f.Add(uint8(modeKVQuotedRaw), "u", "ab'cdef=x", "h", "app", "")
	f.Add(uint8(modeKVQuotedRaw), "u", `tail\`, "h", "app", "")
	f.Add(uint8(modeKVPasswordFirstRaw), "u", "ab dbname=evil", "h", "app", "")
	f.Add(uint8(modeURLUserinfoEncoded), "u", "p@ss/w?rd&=", "[::1]", "db", "sslmode=disable")
	f.Add(uint8(modeURLUserinfoEncoded), "us er", "pässwörd", "h1,h2", "d b", "")
	f.Add(uint8(modeURLQueryEncoded), "u", "s3cr3t&x", "h", "db", "application_name=x")
	f.Add(uint8(modeKVQuotedEscaped), "u", `it's a \ secret`, "/tmp", "app", "")
	f.Add(uint8(modeFree), "", "", "", "", "postgres://u:p@ssw0rd@h/db")
	f.Add(uint8(modeFree), "", "", "", "", "host=h password='abc")
	f.Add(uint8(modeFree), "", "", "", "", "POSTGRES://u:hunter2@h/db?sslmode=disable")
	f.Add(uint8(modeFree), "", "", "", "", "postgresql://[::1/db")
	f.Fuzz(func(t *testing.T, mode uint8, user, password, host, db, extra string) {
		mode %= numModes
		if mode == modeFree {
			checkRedactAgrees(t, extra)
			return
		}
		if len(password) < 4 {
			return
		}
		if mode < modeURLUserinfoEncoded {
			user, host, db = plainName(user, "u"), plainName(host, "h"), plainName(db, "db")
		}
		in := buildConnString(mode, user, password, host, db, extra)
		red, dbErr := checkRedactAgrees(t, in)

		// The non-secret parts: the input with the password cut out, and what
		// RedactURL and Validate print for the same input with a neutral
		// password (a letter found nowhere in the input).
		neutralByte := byte(0)
		for _, c := range []byte("QZXJKVWqzxjkvw") {
			if !strings.ContainsRune(in, rune(c)) {
				neutralByte = c
				break
			}
		}
		if neutralByte == 0 {
			return
		}
		neutralPW := strings.Repeat(string(neutralByte), len(password))
		neutralIn := buildConnString(mode, user, neutralPW, host, db, extra)
		neutralRed, neutralErr := checkRedactAgrees(t, neutralIn)
		nonSecret := strings.Replace(in, password, "\x00", 1) + "\x00" + neutralRed + "\x00" + neutralErr +
			"\x00" + user + "\x00" + host + "\x00" + db + "\x00" + extra + "\x00" + shownFields(neutralIn)
		if p := leaks(red, nonSecret, password); p != "" {
			t.Fatalf("RedactURL(%q) = %q shows %q of the password %q", in, red, p, password)
		}
		if p := leaks(dbErr, nonSecret, password); p != "" {
			t.Fatalf("Validate(%q): %q shows %q of the password %q", in, dbErr, p, password)
		}
		if p := leaks(shownFields(in), nonSecret, password); p != "" {
			t.Fatalf("pgx.ParseConfig(%q) puts %q of the password %q in a field that connection errors or the server may print: %q",
				in, p, password, shownFields(in))
		}
		// Escaped correctly, the password cannot change what is shown.
		if mode >= modeURLUserinfoEncoded && !strings.ContainsRune(password, 0) {
			if red != neutralRed || dbErr != neutralErr {
				t.Fatalf("output depends on a correctly escaped password:\n%q -> %q %q\n%q -> %q %q",
					in, red, dbErr, neutralIn, neutralRed, neutralErr)
			}
		}
	})
}

// shownFields returns, for a string Validate accepts, the parsed fields that
// may be printed: host, user, database (connection errors) and the names of
// the runtime parameters (the server quotes an unknown one). Runtime parameter
// values are left out: a raw password that spells a whole known setting
// ("password=ab statement_timeout=5s") cannot be told from that setting.
func shownFields(s string) string {
	if checkConnString(s) != nil {
		return ""
	}
	cfg, err := pgx.ParseConfig(s)
	if err != nil {
		return ""
	}
	out := []string{cfg.Host, cfg.User, cfg.Database}
	for _, fb := range cfg.Fallbacks {
		out = append(out, fb.Host)
	}
	for k := range cfg.RuntimeParams {
		out = append(out, k)
	}
	return strings.Join(out, "\x00")
}

// checkRedactAgrees returns RedactURL(s) and Validate's INBOXD_DATABASE_URL
// error line for s, and checks that they agree: Validate refuses s exactly
// when RedactURL gives "(invalid)", with one line naming the variable.
func checkRedactAgrees(t *testing.T, s string) (redacted, errLine string) {
	t.Helper()
	redacted = RedactURL(s)
	err := Config{DatabaseURL: s}.Validate() // other fields zero: their lines are ignored
	var lines []string
	if err != nil {
		for _, l := range strings.Split(err.Error(), "\n") {
			if strings.HasPrefix(l, "INBOXD_DATABASE_URL") {
				lines = append(lines, l)
			}
		}
	}
	switch {
	case s == "":
		return redacted, strings.Join(lines, "\n")
	case len(lines) > 1:
		t.Fatalf("Validate(%q): %d lines about INBOXD_DATABASE_URL: %q", s, len(lines), lines)
	case (len(lines) == 1) != (redacted == "(invalid)"):
		t.Fatalf("Validate(%q) = %q but RedactURL = %q", s, lines, redacted)
	}
	if len(lines) == 1 {
		errLine = lines[0]
	}
	return redacted, errLine
}

// plainName keeps the letters, digits, "." and "_" of s, or gives def.
func plainName(s, def string) string {
	s = strings.Map(func(r rune) rune {
		if r < utf8.RuneSelf && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_') {
			return r
		}
		return -1
	}, s)
	if s == "" {
		return def
	}
	return s
}

func buildConnString(mode uint8, user, password, host, db, extra string) string {
	switch mode {
	case modeURLUserinfoRaw:
		return "postgres://" + user + ":" + password + "@" + host + ":5432/" + db + "?sslmode=disable"
	case modeURLQueryRaw:
		return "postgresql://" + user + "@" + host + ":5432/" + db + "?password=" + password + "&sslmode=disable"
	case modeURLQueryNoPathRaw:
		return "postgres://" + host + ":5432?user=" + user + "&dbname=" + db + "&password=" + password
	case modeKVUnquotedRaw:
		return "host=" + host + " port=5432 user=" + user + " dbname=" + db + " password=" + password + " sslmode=disable"
	case modeKVQuotedRaw:
		return "host=" + host + " port=5432 user=" + user + " dbname=" + db + " password='" + password + "' sslmode=disable"
	case modeKVPasswordFirstRaw:
		return "password=" + password + " host=" + host + " port=5432 user=" + user + " dbname=" + db
	case modeURLUserinfoEncoded:
		return "postgres://" + pctAll(user) + ":" + pctAll(password) + "@" + pctAll(host) + ":5432/" + pctAll(db) + "?" + pctQuery(extra)
	case modeURLQueryEncoded:
		return "postgres://" + pctAll(user) + "@" + pctAll(host) + ":5432/" + pctAll(db) + "?password=" + pctAll(password) + "&" + pctQuery(extra)
	case modeKVQuotedEscaped:
		return "host='" + kvQuote(host) + "' port=5432 user='" + kvQuote(user) + "' dbname='" + kvQuote(db) + "' password='" + kvQuote(password) + "'"
	}
	panic(mode)
}

// pctAll percent-encodes every byte but ASCII letters and digits.
func pctAll(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < utf8.RuneSelf && (c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// pctQuery makes extra a well-formed "application_name=…" parameter, so the
// encoded modes always have one non-secret query parameter.
func pctQuery(extra string) string { return "application_name=" + pctAll(extra) }

// kvQuote escapes s for a single-quoted key=value value.
func kvQuote(s string) string {
	return strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s)
}
