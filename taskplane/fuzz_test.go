package taskplane

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// FuzzPushConfigValidate feeds arbitrary push-notification configs to their validation. It
// never panics; an accepted config has an id a path segment and the store can carry, an
// absolute http(s) URL without user information that a request can be made to, and secrets that
// can be sent as one header line each; a refusal is ErrInvalid.
func FuzzPushConfigValidate(f *testing.F) {
	for _, s := range []struct {
		id, url, token, scheme, creds string
		auth                          bool
	}{
		{"c1", "https://hooks.example.com/c1", "secret-token-c1", "Bearer", "secret-cred-c1", true},
		{"", "http://127.0.0.1:9/hook?x=1", "", "", "", false},
		{"a/b", "https://h.example/", "t", "Basic", "dXNlcjpwYXNz", true},
		{" c", "https://user:pw@h.example/", "t\r\nX-Evil: 1", "Bear er", "x", true},
		{"c\x00", "ftp://h.example/", "", "", "", true},
		{"c%2F", "https://[::1]:443/p", "\t", "Digest", "a\x7f", true},
	} {
		f.Add(s.id, s.url, s.token, s.scheme, s.creds, s.auth)
	}
	f.Fuzz(func(t *testing.T, id, rawURL, token, scheme, creds string, auth bool) {
		c := PushConfig{ID: id, URL: rawURL, Token: token}
		if auth {
			c.Auth = &PushAuth{Scheme: scheme, Credentials: creds}
		}
		err := c.validate()
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("refusal is not ErrInvalid: %v", err)
			}
			return
		}
		if len(id) > MaxPushConfigIDLen || strings.ContainsAny(id, "/?#%\x00") || !utf8.ValidString(id) || strings.TrimSpace(id) != id {
			t.Fatalf("accepted id %q", id)
		}
		req, rerr := http.NewRequest(http.MethodPost, rawURL, nil)
		if rerr != nil || req.URL.Hostname() == "" || (req.URL.Scheme != "http" && req.URL.Scheme != "https") || req.URL.User != nil {
			t.Fatalf("accepted url %q (%v)", rawURL, rerr)
		}
		values := []string{token}
		if c.Auth != nil {
			if c.Auth.Scheme == "" || strings.ContainsAny(c.Auth.Scheme, " \t\r\n:") {
				t.Fatalf("accepted scheme %q", c.Auth.Scheme)
			}
			values = append(values, c.Auth.Scheme+" "+c.Auth.Credentials)
		}
		for _, v := range values {
			if strings.ContainsAny(v, "\r\n\x00") {
				t.Fatalf("accepted secret %q cannot be one header line", v)
			}
		}
	})
}

// FuzzPageToken feeds arbitrary page tokens to their decoding. It never panics; a token that
// ListTasks would take re-encodes to a token that decodes to the same cursor; a push-config
// token likewise.
func FuzzPageToken(f *testing.F) {
	f.Add(encodeToken(pageToken{T: time.Date(2025, 10, 28, 10, 30, 0, 123456000, time.UTC), ID: "t-1"}))
	f.Add(encodeToken(pageToken{T: time.Date(2025, 10, 28, 10, 30, 0, 0, time.FixedZone("", -7*3600)), ID: "ü"}))
	f.Add(encodeToken("cfg-1"))
	f.Add("eyJ0IjoiMDAwMS0wMS0wMVQwMDowMDowMFoiLCJpIjoieCJ9")
	f.Add("not base64!")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		var tok pageToken
		if err := decodeToken(s, &tok); err == nil && tok.ID != "" && !tok.T.IsZero() && storableKey(tok.ID) {
			var back pageToken
			if err := decodeToken(encodeToken(tok), &back); err != nil || !back.T.Equal(tok.T) || back.ID != tok.ID {
				t.Fatalf("cursor %+v reads back as %+v (%v)", tok, back, err)
			}
		}
		var after string
		if err := decodeToken(s, &after); err == nil && after != "" && storableKey(after) {
			var back string
			if err := decodeToken(encodeToken(after), &back); err != nil || back != after {
				t.Fatalf("push cursor %q reads back as %q (%v)", after, back, err)
			}
		}
	})
}

// A push config URL whose authority is only a port ("http://:", "https://:443/hook") names no
// host: a client's push target must name the host it is on (Go would dial this machine), so it
// is refused at registration like a URL without an authority.
func TestAPushConfigURLWithoutAHostNameIsRefused(t *testing.T) {
	for _, u := range []string{"http://:", "https://:443/hook", "http://:80"} {
		c := PushConfig{ID: "c1", URL: u}
		if err := c.validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("validate(%q) = %v, want ErrInvalid", u, err)
		}
	}
}
