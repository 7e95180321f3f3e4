package sensitive

// MaskHeaders returns a row's headers column as read from the database (a
// JSON object: each name to its value, a string or {"base64": "…"}) with
// the value of every credential-like header replaced by Masked: what the
// console's row page and `inboxd show` print. Anything but an object is
// returned as it is; the argument is never changed.
func MaskHeaders(headers any) any {
	hs, ok := headers.(map[string]any)
	if !ok {
		return headers
	}
	out := make(map[string]any, len(hs))
	for name, v := range hs {
		if CredentialHeader(name) && v != nil && v != "" {
			v = Masked
		}
		out[name] = v
	}
	return out
}
