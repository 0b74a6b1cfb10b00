// Package redact keeps secrets that travel in URLs out of error messages, which end up in logs,
// evidence and delivery records.
package redact

import (
	"net/url"
	"regexp"
	"strings"
)

// URLError returns err, the error of a failed HTTP request, with the URL in it cut down to its
// scheme and host: net/http's Client reports a *url.Error whose message holds the whole URL, and
// a receiver's URL often carries a secret in its path or query. The cause is kept, so errors.Is
// and errors.As see the same chain. Any other error is returned as it is.
func URLError(err error) error {
	ue, ok := err.(*url.Error)
	if !ok {
		return err
	}
	c := *ue
	c.URL = Origin(ue.URL)
	return &c
}

// NoOrigin is what Origin returns for a URL without a host.
const NoOrigin = "(url)"

// Origin returns the scheme and host of raw ("https://example.com:8443"), or NoOrigin when raw
// does not parse as an absolute URL.
func Origin(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return NoOrigin
	}
	return u.Scheme + "://" + u.Host
}

// urlPattern matches what looks like an absolute URL inside free text: a scheme, "://", and
// everything up to a space, a quote or an angle bracket.
var urlPattern = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://[^\s"'<>]+`)

// Text returns s with every URL in it cut down to its origin (Origin), for text built by code
// that does not know which part of a URL is secret: a library's error that quotes the URL it
// requested, with the key in its query.
func Text(s string) string {
	return urlPattern.ReplaceAllStringFunc(s, func(u string) string {
		// Punctuation that ends a URL in prose ("… of https://host/x: EOF") is kept.
		trimmed := strings.TrimRight(u, ".,:;)]!?")
		return Origin(trimmed) + u[len(trimmed):]
	})
}

// Error returns err with every URL in its message cut down to its origin (Text); errors.Is and
// errors.As still see err's chain. A nil err stays nil, and an err whose message holds no URL is
// returned as it is.
func Error(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if red := Text(msg); red != msg {
		return &redacted{msg: red, err: err}
	}
	return err
}

type redacted struct {
	msg string
	err error
}

func (r *redacted) Error() string { return r.msg }
func (r *redacted) Unwrap() error { return r.err }
