package stdwebhooks

import "testing"

// The specification's own example signs as its libraries do.
func TestSignsTheSpecVector(t *testing.T) {
	key, err := DecodeSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	got := Sign(key, "msg_p5jXN8AQM9LWM0D4loKWxJek", "1614265330", []byte(`{"test": 2432232314}`))
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Errorf("Sign = %q, want %q", got, want)
	}
	if _, err := DecodeSecret("MfKQ9r8G"); err == nil {
		t.Error("a secret without whsec_ decoded")
	}
}
