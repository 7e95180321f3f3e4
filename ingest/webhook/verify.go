package webhook

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
	// Tolerance from the clock.
	VerifyStaleTimestamp = "stale_timestamp"
	// VerifyRepeatedHeader: a header the signature check reads (the
	// signature, a Standard Webhooks id or timestamp) came more than once.
	// Only one value can have been checked, and a row must be made of what
	// was checked, so the request is refused rather than one value chosen.
	VerifyRepeatedHeader = "repeated_header"
	// VerifyMixedHeaders: a Standard Webhooks request carries headers of
	// both families, webhook-* and svix-*.
	VerifyMixedHeaders = "mixed_headers"
)

// verifyReasons are the reason label's values.
var verifyReasons = []string{VerifyMissingSignature, VerifyBadSignature, VerifyMissingID,
	VerifyMissingTimestamp, VerifyBadTimestamp, VerifyStaleTimestamp, VerifyRepeatedHeader, VerifyMixedHeaders}

// Header names of the schemes.
const (
	githubSignatureHeader = "X-Hub-Signature-256"
	githubSHA1Header      = "X-Hub-Signature"
)

// standardFamily is one family of Standard Webhooks header names: the
// specification's webhook-*, or svix-*, which Svix sends unless its
// account is white-labelled (svix's own verifier reads both). A request
// uses one family; its headers say the same things under either.
type standardFamily struct{ id, timestamp, signature string }

// standardFamilies are the families a standard-webhooks source accepts,
// the specification's first.
var standardFamilies = []standardFamily{
	{"webhook-id", "webhook-timestamp", "webhook-signature"},
	{"svix-id", "svix-timestamp", "svix-signature"},
}

// schemeSigns reports whether the scheme's signature covers the header
// named name (any case): under Standard Webhooks the id and the timestamp
// of either family; under github and hmac-sha256, which sign the body
// alone, none.
func schemeSigns(scheme, name string) bool {
	if scheme != Standard {
		return false
	}
	n := strings.ToLower(name)
	for _, f := range standardFamilies {
		if n == f.id || n == f.timestamp {
			return true
		}
	}
	return false
}

// standardIDHeader reports whether name (any case) is a Standard Webhooks
// id header: as a source's event_id, it means the signed id, whichever
// family the request uses.
func standardIDHeader(name string) bool {
	n := strings.ToLower(name)
	return n == standardFamilies[0].id || n == standardFamilies[1].id
}

// signatureHeaders are the headers of s's scheme that carry a signature:
// never stored with a row.
func signatureHeaders(s SourceConfig) []string {
	switch s.Verify {
	case Standard:
		return []string{standardFamilies[0].signature, standardFamilies[1].signature}
	case GitHub:
		return []string{githubSignatureHeader, githubSHA1Header}
	case HMAC:
		return []string{s.Header}
	}
	return nil
}

// webhookVerifier checks a request's signature against a source's
// secrets. Every comparison of a MAC is constant-time.
type webhookVerifier struct {
	scheme string
	keys   [][]byte // the secrets as HMAC keys
	header string   // the signature's header (hmac-sha256, github)
	prefix string   // before the MAC in header
}

// newWebhookVerifier returns s's verifier; s must be valid.
func newWebhookVerifier(s SourceConfig) webhookVerifier {
	v := webhookVerifier{scheme: s.Verify, header: s.Header, prefix: s.Prefix}
	for _, sec := range s.Secrets {
		if s.Verify == Standard {
			key, _ := standardSecret(sec)
			v.keys = append(v.keys, key)
		} else {
			v.keys = append(v.keys, []byte(sec))
		}
	}
	if s.Verify == GitHub {
		v.header, v.prefix = githubSignatureHeader, "sha256="
	}
	return v
}

// verify returns "" when the request is authentic, else the reason it is
// not (a verify* constant).
func (v webhookVerifier) verify(h http.Header, body []byte, now time.Time) string {
	switch v.scheme {
	case None:
		return ""
	case Standard:
		return v.verifyStandard(h, body, now)
	default:
		sig, repeated := singleHeader(h, v.header)
		if repeated {
			return VerifyRepeatedHeader
		}
		return v.verifyHMAC(sig, body)
	}
}

// singleHeader returns the value of the header named name, and whether it
// came more than once (its value is then "").
func singleHeader(h http.Header, name string) (value string, repeated bool) {
	vs := h.Values(name)
	switch len(vs) {
	case 0:
		return "", false
	case 1:
		return vs[0], false
	}
	return "", true
}

// standardFamilyOf returns the header family a Standard Webhooks request
// uses, or a reason to refuse it: both families at once. A request with
// neither is taken as the specification's, and fails on its missing
// signature.
func standardFamilyOf(h http.Header) (standardFamily, string) {
	var used []standardFamily
	for _, f := range standardFamilies {
		if len(h.Values(f.id)) > 0 || len(h.Values(f.timestamp)) > 0 || len(h.Values(f.signature)) > 0 {
			used = append(used, f)
		}
	}
	switch len(used) {
	case 0:
		return standardFamilies[0], ""
	case 1:
		return used[0], ""
	}
	return standardFamily{}, VerifyMixedHeaders
}

// verifyStandard checks a Standard Webhooks signature: the signature
// header holds space-separated "v1,<base64 HMAC-SHA256 of
// id.timestamp.body>"; one matching any key is enough. The headers are one
// family's (webhook-* or svix-*), each once. The timestamp is checked
// first, so a replayed request is refused whatever its signature.
func (v webhookVerifier) verifyStandard(h http.Header, body []byte, now time.Time) string {
	f, reason := standardFamilyOf(h)
	if reason != "" {
		return reason
	}
	id, idRep := singleHeader(h, f.id)
	ts, tsRep := singleHeader(h, f.timestamp)
	sigs, sigRep := singleHeader(h, f.signature)
	switch {
	case idRep || tsRep || sigRep:
		return VerifyRepeatedHeader
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
	const tol = int64(Tolerance / time.Second)
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
