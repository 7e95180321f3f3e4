// Package stdwebhooks signs requests as a Standard Webhooks sender does
// (https://www.standardwebhooks.com/): the senders of the demo, the fault
// suite and the benchmarks. The verification is ingest's (it never signs).
package stdwebhooks

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strings"
)

// Sign returns the webhook-signature value of a request:
// "v1," + base64(HMAC-SHA256(key, id + "." + timestamp + "." + body)).
func Sign(key []byte, id, timestamp string, body []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id))
	mac.Write([]byte{'.'})
	mac.Write([]byte(timestamp))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// DecodeSecret returns the key of a secret written whsec_<base64>, padded
// or not.
func DecodeSecret(secret string) ([]byte, error) {
	b64, ok := strings.CutPrefix(strings.TrimSpace(secret), "whsec_")
	if !ok {
		return nil, errors.New("a Standard Webhooks secret starts with whsec_")
	}
	key, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(b64, "="))
	if err != nil || len(key) == 0 {
		return nil, errors.New("a Standard Webhooks secret is whsec_ followed by base64")
	}
	return key, nil
}
