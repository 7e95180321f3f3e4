package natsurl

import "testing"

func TestNATSURL(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in, redacted string
		valid, tls   bool
	}{
		{"nats://127.0.0.1:4222", "nats://127.0.0.1:4222", true, false},
		{"nats://u:s3cret@h1:4222, tls://t0ken@h2:4443", "nats://u@h1:4222,tls://%5Bredacted%5D@h2:4443", true, true},
		{"nats://h1,http://h2", "nats://h1,http://h2", false, false},
		{"h1:4222", "(invalid)", false, false},
		{" , ", "", false, false},
	} {
		if got := Redact(c.in); got != c.redacted {
			t.Errorf("Redact(%q) = %q, want %q", c.in, got, c.redacted)
		}
		if got := Valid(c.in); got != c.valid {
			t.Errorf("Valid(%q) = %v", c.in, got)
		}
		if got := TLS(c.in); got != c.tls {
			t.Errorf("TLS(%q) = %v", c.in, got)
		}
	}
}
