package taskplane

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/big"
	"net/http"
	"strconv"
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

// FuzzCanonicalData feeds arbitrary bytes to the canonical form a data part is digested in. It
// never panics; bytes that are not one JSON value are kept as written (so the digest refuses
// them as the stored part would be); the form is its own canonical form; a JSON value written
// another way — other whitespace, other escapes, numbers with other digits for the same value —
// has the same form; and two values have one form exactly when they are equal (numbers compared
// by exact value).
func FuzzCanonicalData(f *testing.F) {
	for _, s := range [][2]string{
		{`{"b":[1,2.50,{"c":null}],"a":"x"}`, `{"a":"\u0078","b":[1e0,25e-1,{"c":null}]}`},
		{`9007199254740993`, `9007199254740992`},
		{`"\ud83d\ude00"`, `"😀"`},
		{`"\ud83d"`, `"\ufffd"`},
		{`1 2`, `1 3`},
		{`{"a":1,"a":2}`, `{"a":2}`},
		{`-0`, `0.0e5`},
		{`1e1073741825`, `10e1073741824`},
		{"\"\xff\"", `"\ufffd"`},
		{`[true,false,null,"<&>"]`, `[true,false,null,"\u003c\u0026\u003e"]`},
	} {
		f.Add([]byte(s[0]), []byte(s[1]))
	}
	f.Fuzz(func(t *testing.T, a, b []byte) {
		ca := canonicalData(a)
		if !json.Valid(a) {
			if !bytes.Equal(ca, a) {
				t.Fatalf("canonicalData(%q) = %q: not one JSON value, it is kept as written", a, ca)
			}
			return
		}
		if !json.Valid(ca) {
			t.Fatalf("canonicalData(%q) = %q is not JSON", a, ca)
		}
		if again := canonicalData(ca); !bytes.Equal(again, ca) {
			t.Fatalf("canonicalData(%q) = %q, of which the form is %q", a, ca, again)
		}
		asWritten := !utf8.Valid(a) || hasLoneSurrogateEscape(a)
		if asWritten {
			if !bytes.Equal(ca, a) {
				t.Fatalf("canonicalData(%q) = %q, want it as written", a, ca)
			}
			return
		}
		v := decodeNumbers(t, a)
		for _, other := range rewrites(t, v) {
			if co := canonicalData(other); !bytes.Equal(co, ca) {
				t.Fatalf("%q and %q, one value written two ways, have the forms %q and %q", a, other, ca, co)
			}
		}
		if !json.Valid(b) || !utf8.Valid(b) || hasLoneSurrogateEscape(b) {
			return
		}
		equal, ok := sameJSON(v, decodeNumbers(t, b))
		if !ok {
			return // a number too large to compare exactly here
		}
		if cb := canonicalData(b); bytes.Equal(ca, cb) != equal {
			t.Fatalf("%q and %q: equal %v, forms %q and %q", a, b, equal, ca, cb)
		}
	})
}

// decodeNumbers decodes the JSON value raw with its numbers as written.
func decodeNumbers(t *testing.T, raw []byte) any {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatalf("decode %q: %v", raw, err)
	}
	return v
}

// rewrites is v written in other ways: indented, without HTML escapes, and with every number
// given other digits for the same value.
func rewrites(t *testing.T, v any) [][]byte {
	var plain, indented bytes.Buffer
	e := json.NewEncoder(&plain)
	e.SetEscapeHTML(false)
	if err := e.Encode(v); err != nil {
		t.Fatal(err)
	}
	e = json.NewEncoder(&indented)
	e.SetIndent(" ", "\t")
	renumbered, err := json.Marshal(otherDigits(v))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Encode(v); err != nil {
		t.Fatal(err)
	}
	return [][]byte{plain.Bytes(), indented.Bytes(), renumbered}
}

// otherDigits is v with each number written with other digits of the same value: 12 as 12.0e0,
// 1.5 as 1.50, 0.5e3 as 0.50e3 (one with an exponent past ±10,000 as written).
func otherDigits(v any) any {
	switch v := v.(type) {
	case map[string]any:
		c := make(map[string]any, len(v))
		for k, e := range v {
			c[k] = otherDigits(e)
		}
		return c
	case []any:
		c := make([]any, len(v))
		for i, e := range v {
			c[i] = otherDigits(e)
		}
		return c
	case json.Number:
		if _, small := exactNumber(string(v)); !small {
			return v // an exponent this large is kept as written
		}
		mant, exp, hasExp := strings.Cut(strings.ToLower(string(v)), "e")
		switch {
		case strings.Contains(mant, "."):
			mant += "0"
		default:
			mant += ".0"
		}
		if !hasExp {
			exp = "0"
		}
		return json.Number(mant + "e" + exp)
	}
	return v
}

// sameJSON reports whether the decoded JSON values a and b are equal, numbers by exact value; ok
// is false when a number's exponent is too large to compare that way here.
func sameJSON(a, b any) (equal, ok bool) {
	switch a := a.(type) {
	case map[string]any:
		b, isMap := b.(map[string]any)
		if !isMap || len(a) != len(b) {
			return false, true
		}
		equal = true
		for k, ea := range a {
			eb, found := b[k]
			if !found {
				equal = false
				continue
			}
			e, o := sameJSON(ea, eb)
			if !o {
				return false, false
			}
			equal = equal && e
		}
		return equal, true
	case []any:
		b, isList := b.([]any)
		if !isList || len(a) != len(b) {
			return false, true
		}
		equal = true
		for i := range a {
			e, o := sameJSON(a[i], b[i])
			if !o {
				return false, false
			}
			equal = equal && e
		}
		return equal, true
	case json.Number:
		b, isNumber := b.(json.Number)
		if !isNumber {
			return false, true
		}
		ra, oka := exactNumber(string(a))
		rb, okb := exactNumber(string(b))
		if !oka || !okb {
			return false, false
		}
		return ra.Cmp(rb) == 0, true
	}
	return a == b, true
}

// exactNumber is the JSON number s as an exact rational, unless its exponent is past ±10,000.
func exactNumber(s string) (*big.Rat, bool) {
	if _, exp, ok := strings.Cut(strings.ToLower(s), "e"); ok {
		if e, err := strconv.Atoi(exp); err != nil || e > 10000 || e < -10000 {
			return nil, false
		}
	}
	return new(big.Rat).SetString(s)
}
