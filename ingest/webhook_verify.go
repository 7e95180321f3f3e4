package ingest

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The reasons a webhook request fails verification: the values of the
// reason label of inboxd_webhook_verify_failures_total.
const (
	// VerifyMissingSignature: the signature header is absent or empty.
	VerifyMissingSignature = "missing_signature"
	// VerifyBadSignature: no signature matches any secret.
	VerifyBadSignature = "bad_signature"
	// VerifyMissingID: a Standard Webhooks request without webhook-id
	// (it is part of what is signed).
	VerifyMissingID = "missing_id"
	// VerifyMissingTimestamp: a Standard Webhooks request without
	// webhook-timestamp.
	VerifyMissingTimestamp = "missing_timestamp"
	// VerifyBadTimestamp: webhook-timestamp is not a number of seconds.
	VerifyBadTimestamp = "bad_timestamp"
	// VerifyStaleTimestamp: webhook-timestamp is further than
	// WebhookTolerance from the clock.
	VerifyStaleTimestamp = "stale_timestamp"
)

// verifyReasons are the reason label's values.
var verifyReasons = []string{VerifyMissingSignature, VerifyBadSignature, VerifyMissingID,
	VerifyMissingTimestamp, VerifyBadTimestamp, VerifyStaleTimestamp}

// Header names of the schemes.
const (
	standardIDHeader        = "webhook-id"
	standardTimestampHeader = "webhook-timestamp"
	standardSignatureHeader = "webhook-signature"
	githubSignatureHeader   = "X-Hub-Signature-256"
	githubSHA1Header        = "X-Hub-Signature"
)

// webhookVerifier checks a request's signature against a source's
// secrets. Every comparison of a MAC is constant-time.
type webhookVerifier struct {
	scheme string
	keys   [][]byte // the secrets as HMAC keys
	header string   // the signature's header (hmac-sha256, github)
	prefix string   // before the MAC in header
}

// newWebhookVerifier returns s's verifier; s must be valid.
func newWebhookVerifier(s WebhookSourceConfig) webhookVerifier {
	v := webhookVerifier{scheme: s.Verify, header: s.Header, prefix: s.Prefix}
	for _, sec := range s.Secrets {
		if s.Verify == WebhookStandard {
			key, _ := standardSecret(sec)
			v.keys = append(v.keys, key)
		} else {
			v.keys = append(v.keys, []byte(sec))
		}
	}
	if s.Verify == WebhookGitHub {
		v.header, v.prefix = githubSignatureHeader, "sha256="
	}
	return v
}

// signatureHeaders are the headers that carry the signature: not stored
// with the row.
func (v webhookVerifier) signatureHeaders() []string {
	switch v.scheme {
	case WebhookStandard:
		return []string{standardSignatureHeader}
	case WebhookGitHub:
		return []string{githubSignatureHeader, githubSHA1Header}
	case WebhookHMAC:
		return []string{v.header}
	}
	return nil
}

// verify returns "" when the request is authentic, else the reason it is
// not (a verify* constant).
func (v webhookVerifier) verify(h http.Header, body []byte, now time.Time) string {
	switch v.scheme {
	case WebhookNone:
		return ""
	case WebhookStandard:
		return v.verifyStandard(h, body, now)
	default:
		return v.verifyHMAC(h.Get(v.header), body)
	}
}

// verifyStandard checks a Standard Webhooks signature: webhook-signature
// holds space-separated "v1,<base64 HMAC-SHA256 of id.timestamp.body>";
// one matching any key is enough. The timestamp is checked first, so a
// replayed request is refused whatever its signature.
func (v webhookVerifier) verifyStandard(h http.Header, body []byte, now time.Time) string {
	id, ts, sigs := h.Get(standardIDHeader), h.Get(standardTimestampHeader), h.Get(standardSignatureHeader)
	switch {
	case sigs == "":
		return VerifyMissingSignature
	case id == "":
		return VerifyMissingID
	case ts == "":
		return VerifyMissingTimestamp
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return VerifyBadTimestamp
	}
	const tol = int64(WebhookTolerance / time.Second)
	if d := now.Unix() - sec; d > tol || d < -tol {
		return VerifyStaleTimestamp
	}
	macs := make([][]byte, len(v.keys))
	for i, key := range v.keys {
		m := hmac.New(sha256.New, key)
		m.Write([]byte(id))
		m.Write([]byte{'.'})
		m.Write([]byte(ts))
		m.Write([]byte{'.'})
		m.Write(body)
		macs[i] = m.Sum(nil)
	}
	for sig := range strings.FieldsSeq(sigs) {
		b64, ok := strings.CutPrefix(sig, "v1,")
		if !ok {
			continue // another version, or an asymmetric v1a: not ours
		}
		got, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			continue
		}
		for _, want := range macs {
			if hmac.Equal(got, want) {
				return ""
			}
		}
	}
	return VerifyBadSignature
}

// verifyHMAC checks value, the signature header's, as prefix followed by
// the HMAC-SHA256 of body under one of the keys, in hex or base64.
func (v webhookVerifier) verifyHMAC(value string, body []byte) string {
	value = strings.TrimSpace(value)
	if value == "" {
		return VerifyMissingSignature
	}
	enc, ok := strings.CutPrefix(value, v.prefix)
	if !ok {
		return VerifyBadSignature
	}
	got := decodeMAC(enc)
	if got == nil {
		return VerifyBadSignature
	}
	for _, key := range v.keys {
		m := hmac.New(sha256.New, key)
		m.Write(body)
		if hmac.Equal(got, m.Sum(nil)) {
			return ""
		}
	}
	return VerifyBadSignature
}

// decodeMAC decodes a SHA-256 MAC written in hex (any case) or base64;
// nil when it is neither.
func decodeMAC(s string) []byte {
	if len(s) == hex.EncodedLen(sha256.Size) {
		if b, err := hex.DecodeString(s); err == nil {
			return b
		}
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil && len(b) == sha256.Size {
			return b
		}
	}
	return nil
}
