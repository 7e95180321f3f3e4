// Package sensitive holds the one rule for which header names look like they
// carry a credential: the webhook source does not store their values by
// default, and the console and the CLI mask them when they show a row stored
// before (or by another writer).
package sensitive

import "strings"

// credentialWords are the fragments that mark a header name as
// credential-like, matched case-insensitively anywhere in the name:
// x-api-key, x-auth-token, client-secret, authorization, cookie,
// x-session-id, x-amz-security-token and their kind.
var credentialWords = []string{"key", "token", "secret", "passw", "auth", "cookie", "credential", "session", "signature"}

// notCredentials are names that contain a credential word but carry none:
// the idempotency key and the ordering key inboxd itself reads.
var notCredentials = map[string]bool{
	"idempotency-key": true,
	"key":             true,
}

// CredentialHeader reports whether a header named name looks like it
// carries a credential (a key, token, secret, password, session, cookie or
// signature), whatever its case.
func CredentialHeader(name string) bool {
	n := strings.ToLower(strings.TrimSpace(name))
	if notCredentials[n] {
		return false
	}
	for _, w := range credentialWords {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// Masked is what a page or a listing shows in place of a credential-like
// header's value.
const Masked = "••••••"

// Mask returns value, or Masked when the header named name is
// credential-like and value is not empty.
func Mask(name, value string) string {
	if value != "" && CredentialHeader(name) {
		return Masked
	}
	return value
}
