// Package redact keeps secrets that travel in URLs out of error messages, which end up in logs,
// evidence and delivery records.
package redact

import "net/url"

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
