package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The Standard Webhooks specification's published test vector
// (standard-webhooks/standard-webhooks, libraries' tests).
const (
	specMsgID     = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	specTimestamp = "1614265330"
	specBody      = `{"test": 2432232314}`
	specSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	specSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

// GitHub's documented example (docs.github.com, "Validating webhook
// deliveries").
const (
	githubSecret    = "It's a Secret to Everybody"
	githubBody      = "Hello, World!"
	githubSignature = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
)

var specTime = time.Unix(1614265330, 0)

func standardVerifier(secrets ...string) webhookVerifier {
	return newWebhookVerifier(SourceConfig{Verify: Standard, Secrets: secrets}.withDefaults())
}

func standardHeaders(id, ts, sig string) http.Header {
	h := http.Header{}
	for k, v := range map[string]string{"webhook-id": id, "webhook-timestamp": ts, "webhook-signature": sig} {
		if v != "" {
			h.Set(k, v)
		}
	}
	return h
}

// signStandard signs as a Standard Webhooks sender does.
func signStandard(t testing.TB, secret, id string, ts int64, body []byte) string {
	t.Helper()
	key, err := standardSecret(secret)
	if err != nil {
		t.Fatal(err)
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id + "." + strconv.FormatInt(ts, 10) + "."))
	m.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}

func signHex(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

func TestStandardWebhooksSpecVector(t *testing.T) {
	t.Parallel()
	v := standardVerifier(specSecret)
	if got := v.verify(standardHeaders(specMsgID, specTimestamp, specSignature), []byte(specBody), specTime); got != "" {
		t.Fatalf("the specification's vector fails: %s", got)
	}
	// Our signer gives the specification's signature.
	if got := signStandard(t, specSecret, specMsgID, 1614265330, []byte(specBody)); got != specSignature {
		t.Fatalf("signature = %s, want %s", got, specSignature)
	}
}

func TestGitHubDocumentedExample(t *testing.T) {
	t.Parallel()
	v := newWebhookVerifier(SourceConfig{Verify: GitHub, Secrets: []string{githubSecret}}.withDefaults())
	h := http.Header{}
	h.Set("X-Hub-Signature-256", githubSignature)
	if got := v.verify(h, []byte(githubBody), time.Now()); got != "" {
		t.Fatalf("GitHub's example fails: %s", got)
	}
	h.Set("X-Hub-Signature-256", "sha256="+signHex(githubSecret, []byte(githubBody+"!")))
	if got := v.verify(h, []byte(githubBody), time.Now()); got != VerifyBadSignature {
		t.Fatalf("tampered: %q, want %s", got, VerifyBadSignature)
	}
}

func TestWebhookVerifyHandBuilt(t *testing.T) {
	t.Parallel()
	const other = "whsec_" + "c2Vjb25kIHNlY3JldCBvZiB0aGUgcm90YXRpb24=" // "second secret of the rotation"
	body := []byte(`{"type":"payment.succeeded","id":"p1"}`)
	now := time.Unix(1700000000, 0)
	sig := func(secret string, ts int64, b []byte) string { return signStandard(t, secret, "msg_1", ts, b) }
	ts := strconv.FormatInt(now.Unix(), 10)
	std := []struct {
		name    string
		secrets []string
		h       http.Header
		body    []byte
		want    string
	}{
		{"valid", []string{specSecret}, standardHeaders("msg_1", ts, sig(specSecret, now.Unix(), body)), body, ""},
		{"tampered body", []string{specSecret}, standardHeaders("msg_1", ts, sig(specSecret, now.Unix(), body)), append([]byte(" "), body...), VerifyBadSignature},
		{"wrong secret", []string{specSecret}, standardHeaders("msg_1", ts, sig(other, now.Unix(), body)), body, VerifyBadSignature},
		{"tampered id", []string{specSecret}, standardHeaders("msg_2", ts, sig(specSecret, now.Unix(), body)), body, VerifyBadSignature},
		{"old timestamp", []string{specSecret}, standardHeaders("msg_1", strconv.FormatInt(now.Unix()-301, 10), sig(specSecret, now.Unix()-301, body)), body, VerifyStaleTimestamp},
		{"future timestamp", []string{specSecret}, standardHeaders("msg_1", strconv.FormatInt(now.Unix()+301, 10), sig(specSecret, now.Unix()+301, body)), body, VerifyStaleTimestamp},
		{"within tolerance", []string{specSecret}, standardHeaders("msg_1", strconv.FormatInt(now.Unix()-299, 10), sig(specSecret, now.Unix()-299, body)), body, ""},
		{"rotated: new secret signs", []string{specSecret, other}, standardHeaders("msg_1", ts, sig(other, now.Unix(), body)), body, ""},
		{"rotated: old secret signs", []string{specSecret, other}, standardHeaders("msg_1", ts, sig(specSecret, now.Unix(), body)), body, ""},
		{"several signatures, one good", []string{other}, standardHeaders("msg_1", ts, "v1,AAAA "+sig(specSecret, now.Unix(), body)+" "+sig(other, now.Unix(), body)), body, ""},
		{"v1a ignored", []string{specSecret}, standardHeaders("msg_1", ts, "v1a,"+strings.TrimPrefix(sig(specSecret, now.Unix(), body), "v1,")), body, VerifyBadSignature},
		{"missing signature", []string{specSecret}, standardHeaders("msg_1", ts, ""), body, VerifyMissingSignature},
		{"missing id", []string{specSecret}, standardHeaders("", ts, sig(specSecret, now.Unix(), body)), body, VerifyMissingID},
		{"missing timestamp", []string{specSecret}, standardHeaders("msg_1", "", sig(specSecret, now.Unix(), body)), body, VerifyMissingTimestamp},
		{"bad timestamp", []string{specSecret}, standardHeaders("msg_1", "yesterday", sig(specSecret, now.Unix(), body)), body, VerifyBadTimestamp},
	}
	for _, tc := range std {
		t.Run("standard/"+tc.name, func(t *testing.T) {
			if got := standardVerifier(tc.secrets...).verify(tc.h, tc.body, now); got != tc.want {
				t.Errorf("verify = %q, want %q", got, tc.want)
			}
		})
	}

	hm := newWebhookVerifier(SourceConfig{Verify: HMAC, Header: "X-Signature", Prefix: "sha256=",
		Secrets: []string{"old", "new"}})
	mac := hmac.New(sha256.New, []byte("new"))
	mac.Write(body)
	b64 := base64.StdEncoding.EncodeToString(mac.Sum(nil))
	for _, tc := range []struct {
		name, value string
		body        []byte
		want        string
	}{
		{"valid hex", "sha256=" + signHex("old", body), body, ""},
		{"valid upper-case hex", "sha256=" + strings.ToUpper(signHex("old", body)), body, ""},
		{"valid base64, rotated secret", "sha256=" + b64, body, ""},
		{"tampered body", "sha256=" + signHex("old", body), body[1:], VerifyBadSignature},
		{"wrong secret", "sha256=" + signHex("other", body), body, VerifyBadSignature},
		{"no prefix", signHex("old", body), body, VerifyBadSignature},
		{"garbage", "sha256=zz", body, VerifyBadSignature},
		{"missing", "", body, VerifyMissingSignature},
	} {
		t.Run("hmac/"+tc.name, func(t *testing.T) {
			h := http.Header{}
			if tc.value != "" {
				h.Set("x-signature", tc.value)
			}
			if got := hm.verify(h, tc.body, now); got != tc.want {
				t.Errorf("verify = %q, want %q", got, tc.want)
			}
		})
	}
	if got := newWebhookVerifier(SourceConfig{Verify: None}).verify(http.Header{}, body, now); got != "" {
		t.Errorf("none: %q", got)
	}
}

// FuzzWebhookVerify: verification never panics, a request signed with the
// secret verifies, and any change to its body, id or timestamp does not.
func FuzzWebhookVerify(f *testing.F) {
	f.Add(specMsgID, int64(0), []byte(specBody), specSignature, byte(0))
	f.Add("id", int64(-299), []byte("x"), "v1,garbage v2,x", byte(3))
	f.Add("", int64(400), []byte{}, "", byte(255))
	f.Fuzz(func(t *testing.T, id string, skew int64, body []byte, extra string, flip byte) {
		now := specTime
		v := standardVerifier(specSecret)
		ts := now.Unix() + skew%1000
		tsText := strconv.FormatInt(ts, 10)
		_ = v.verify(standardHeaders(id, tsText, extra), body, now)
		_ = v.verifyHMAC(extra, body)
		if id == "" || strings.ContainsAny(id, "\r\n\x00") || strings.TrimSpace(id) != id {
			return
		}
		good := signStandard(t, specSecret, id, ts, body)
		got := v.verify(standardHeaders(id, tsText, extra+" "+good), body, now)
		inTolerance := ts-now.Unix() <= 300 && now.Unix()-ts <= 300
		switch {
		case inTolerance && got != "":
			t.Fatalf("a signed request fails: %s", got)
		case !inTolerance && got != VerifyStaleTimestamp:
			t.Fatalf("a stale request gives %q", got)
		}
		if inTolerance {
			tampered := append([]byte{flip}, body...)
			if v.verify(standardHeaders(id, tsText, good), tampered, now) == "" {
				t.Fatal("a tampered body verifies")
			}
		}
	})
}
