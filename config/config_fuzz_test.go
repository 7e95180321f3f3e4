package config

import (
	"reflect"
	"strings"
	"testing"
)

// fuzzVars are the INBOXD_* variables FuzzConfigLoad sets: every variable of
// Config except the two *_FILE secrets, which Load reads (a generated path
// such as /dev/zero would hang the fuzzer).
var fuzzVars, allVars = func() (fuzz, all []string) {
	t := reflect.TypeFor[Config]()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("env"), ",")
		all = append(all, name)
		if name != "INBOXD_DATABASE_URL_FILE" && name != "INBOXD_KAFKA_SASL_PASSWORD_FILE" && name != "INBOXD_NATS_URL_FILE" {
			fuzz = append(fuzz, name)
		}
	}
	return fuzz, all
}()

// FuzzConfigLoad sets up to three INBOXD_* variables to arbitrary values on
// top of a valid configuration and checks that Load never panics, that every
// line of its error starts with the name of a known INBOXD_ variable and a
// colon, that the error does not show the database password, and that it
// does not depend on the SASL password beyond whether one is set.
func FuzzConfigLoad(f *testing.F) {
	v := func(name string) uint8 {
		for i, n := range fuzzVars {
			if n == name {
				return uint8(i)
			}
		}
		panic(name)
	}
	f.Add(v("INBOXD_DATABASE_URL"), "postgres://u:p@ssw0rd-Secret@h/db", v("INBOXD_WORKERS"), "0", v("INBOXD_LEASE"), "")
	f.Add(v("INBOXD_DATABASE_URL"), "host=h password='abc", v("INBOXD_KAFKA_BROKERS"), "k1,k2:9092", v("INBOXD_KAFKA_TOPICS"), "")
	f.Add(v("INBOXD_KAFKA_SASL_MECHANISM"), "SCRAM-SHA-512", v("INBOXD_KAFKA_SASL_PASSWORD"), "kafka-secret", v("INBOXD_KAFKA_SASL_USERNAME"), "svc")
	f.Add(v("INBOXD_KAFKA_SASL_MECHANISM"), "GSSAPI", v("INBOXD_KAFKA_SASL_PASSWORD"), "kafka-secret", v("INBOXD_WORKERS"), "lots")
	f.Add(v("INBOXD_STATEMENT_TIMEOUT"), "1e400h", v("INBOXD_KAFKA_TLS"), "maybe", v("INBOXD_LOG_LEVEL"), "\n")
	f.Add(v("INBOXD_PREFETCH"), "-1", v("INBOXD_MAX_ATTEMPTS"), "99999999999999999999", v("INBOXD_LOG_FORMAT"), "loud\nINBOXD_X: y")
	f.Add(v("INBOXD_KAFKA_BROKERS"), " , ,", v("INBOXD_EVENT_ID_HEADERS"), ",", v("INBOXD_HTTP_ADDR"), " ")
	f.Fuzz(func(t *testing.T, n1 uint8, v1 string, n2 uint8, v2 string, n3 uint8, v3 string) {
		vars := map[string]string{
			"INBOXD_DATABASE_URL": "postgres://inboxd:db-s3cret-pw@db:5432/app",
			"INBOXD_HTTP_ADDR":    "",
		}
		for _, nv := range []struct {
			n uint8
			v string
		}{{n1, v1}, {n2, v2}, {n3, v3}} {
			vars[fuzzVars[int(nv.n)%len(fuzzVars)]] = nv.v
		}
		got, err := loadPrinted(vars)
		if err != nil {
			for _, line := range strings.Split(err.Error(), "\n") {
				known := false
				for _, name := range allVars {
					known = known || strings.HasPrefix(line, name+":") || strings.HasPrefix(line, name+" ")
				}
				if !known {
					t.Fatalf("error line %q does not start with a known INBOXD_ variable (environment %q)", line, vars)
				}
			}
		}
		if strings.Contains(got, "db-s3cret-pw") && !inOtherValues(vars, "INBOXD_DATABASE_URL", "db-s3cret-pw") {
			t.Fatalf("the database password is shown: %s", got)
		}
		if vars["INBOXD_KAFKA_SASL_PASSWORD"] != "" {
			// Only whether the SASL password is set may matter: the same
			// configuration with another non-empty password must print the
			// same, word for word.
			vars["INBOXD_KAFKA_SASL_PASSWORD"] = "x"
			if other, _ := loadPrinted(vars); other != got {
				t.Fatalf("what is printed depends on the SASL password:\n%s\nwith another password:\n%s", got, other)
			}
		}
	})
}

// loadPrinted loads vars and returns what may be printed: the error, or the
// configuration's Redacted, String and GoString.
func loadPrinted(vars map[string]string) (string, error) {
	environ := make([]string, 0, len(vars))
	for k, v := range vars {
		environ = append(environ, k+"="+v)
	}
	c, err := Load(environ)
	if err != nil {
		return err.Error(), err
	}
	return c.Redacted() + "\n" + c.String() + "\n" + c.GoString(), nil
}

// inOtherValues reports whether s occurs in the value of a variable other
// than name (then an error may quote it legitimately).
func inOtherValues(vars map[string]string, name, s string) bool {
	for k, v := range vars {
		if k != name && strings.Contains(v, s) {
			return true
		}
	}
	return false
}
