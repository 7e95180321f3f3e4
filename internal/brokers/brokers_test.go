package brokers

import (
	"strings"
	"testing"
)

// TestSASLMechanismsText holds the text errors give to the set itself.
func TestSASLMechanismsText(t *testing.T) {
	t.Parallel()
	n := len(SASLMechanisms)
	want := strings.Join(SASLMechanisms[:n-1], ", ") + " or " + SASLMechanisms[n-1]
	if SASLMechanismsText != want {
		t.Errorf("SASLMechanismsText = %q, want %q", SASLMechanismsText, want)
	}
	for _, m := range append([]string{""}, SASLMechanisms...) {
		if !ValidSASLMechanism(m) {
			t.Errorf("ValidSASLMechanism(%q) = false", m)
		}
	}
	if ValidSASLMechanism("GSSAPI") || ValidSASLMechanism("plain") {
		t.Error("ValidSASLMechanism takes a mechanism outside the set")
	}
}

// TestTLSBuild: off builds nothing; a missing CA file is named, by the
// prefix's variable and the file's name alone.
func TestTLSBuild(t *testing.T) {
	t.Parallel()
	if c, err := (TLS{CAFile: "/nonexistent"}).Build("INBOXD_X_TLS"); c != nil || err != nil {
		t.Errorf("TLS off: got %v, %v", c, err)
	}
	_, err := (TLS{Enabled: true, CAFile: "/nonexistent/ca.pem"}).Build("INBOXD_X_TLS")
	if err == nil || !strings.HasPrefix(err.Error(), "INBOXD_X_TLS_CA_FILE: ") {
		t.Errorf("missing CA file: got %v", err)
	}
	if !(TLS{CertFile: "c"}).HalfKeyPair() || (TLS{CertFile: "c", KeyFile: "k"}).HalfKeyPair() {
		t.Error("HalfKeyPair")
	}
	if !(TLS{CAFile: "c"}).FilesWithoutTLS() || (TLS{Enabled: true, CAFile: "c"}).FilesWithoutTLS() {
		t.Error("FilesWithoutTLS")
	}
}
