// Package bearer reads a bearer token from an HTTP Authorization header (RFC 6750 §2.1), the
// one way every authenticated route of Channels does: the scheme matched without regard to case
// (RFC 9110 §11.1), white space around the token ignored.
package bearer

import "strings"

// Token returns the token of an Authorization header value "Bearer TOKEN"; ok is false when the
// header is not of that form or the token is empty.
func Token(header string) (token string, ok bool) {
	scheme, tok, found := strings.Cut(strings.TrimSpace(header), " ")
	tok = strings.TrimSpace(tok)
	if !found || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return "", false
	}
	return tok, true
}
