package a2aservice

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/a2awire"
)

// FuzzServiceParams feeds arbitrary header values to the reading of a request's service
// parameters: the bearer token, A2A-Version, A2A-Extensions, Last-Event-ID and Content-Type.
// Nothing panics; every refusal is a client protocol error; a token is accepted only when it is
// a configured one; only version 1.0 (any patch) is accepted; a resume point is a non-negative
// event id, read only for streaming operations.
func FuzzServiceParams(f *testing.F) {
	for _, s := range []struct{ auth, version, ext, lastID, ct string }{
		{"Bearer tok-alice-0123456789", "1.0", "https://a2a-protocol.org/extensions/elicitation/v1", "7", "application/json"},
		{"bearer   tok-bob-0123456789  ", "1.0.3", "", "", "application/a2a+json; charset=utf-8"},
		{"", "", "a, b,,c", "-1", ""},
		{"Basic dXNlcjpwYXNz", "0.3", "", "x", "text/plain"},
		{"Bearer", "1", "", "9223372036854775808", "application/json;"},
		{"Bearer tok-alice-0123456789x", "2.0", "", "+3", "APPLICATION/JSON"},
	} {
		f.Add(s.auth, s.version, s.ext, s.lastID, s.ct)
	}
	creds := []Credential{{Token: "tok-alice-0123456789", Principal: "alice"}, {Token: "tok-bob-0123456789", Principal: "bob"}}
	svc, err := New(taskplane.New(nil), nil, nil, Config{Credentials: creds})
	if err != nil {
		f.Fatal(err)
	}
	refusal := func(t *testing.T, what string, err *a2awire.Error) {
		t.Helper()
		if err != nil && (err.Kind == nil || a2awire.KindOf(err).HTTPStatus < 400 || a2awire.KindOf(err).HTTPStatus >= 500) {
			t.Fatalf("%s: refusal is not a client protocol error: %#v", what, err)
		}
	}
	f.Fuzz(func(t *testing.T, auth, version, ext, lastID, ct string) {
		r := httptest.NewRequest(http.MethodPost, "/message:stream", nil)
		for k, v := range map[string]string{"Authorization": auth, HeaderVersion: version, HeaderExtensions: ext,
			HeaderLastEventID: lastID, "Content-Type": ct} {
			r.Header.Set(k, v)
		}

		p, aerr := svc.Authenticate(r)
		refusal(t, "authenticate", aerr)
		if aerr == nil {
			tok := strings.TrimSpace(auth)
			_, tok, _ = strings.Cut(tok, " ")
			tok = strings.TrimSpace(tok)
			ok := false
			for _, c := range creds {
				ok = ok || (c.Token == tok && c.Principal == p)
			}
			if !ok {
				t.Fatalf("Authorization %q accepted as %q", auth, p)
			}
		} else {
			SetChallenge(httptest.NewRecorder(), aerr)
		}

		ext2, nerr := svc.Negotiate(r)
		refusal(t, "negotiate", nerr)
		if nerr == nil {
			if v := strings.TrimSpace(version); v != "" {
				parts := strings.Split(v, ".")
				if len(parts) < 2 {
					t.Fatalf("version %q accepted", version)
				}
				major, _ := strconv.Atoi(parts[0])
				minor, _ := strconv.Atoi(parts[1])
				if major != 1 || minor != 0 {
					t.Fatalf("version %q accepted", version)
				}
			}
			for _, e := range ext2 {
				if !strings.Contains(ext, e) {
					t.Fatalf("extension %q activated but not requested in %q", e, ext)
				}
			}
		}
		// The version as a query parameter reads as the header does.
		q := httptest.NewRequest(http.MethodGet, "/tasks?"+url.Values{HeaderVersion: {version}}.Encode(), nil)
		if _, qerr := svc.Negotiate(q); (qerr == nil) != (nerr == nil) && !strings.ContainsAny(version, "\r\n\x00") {
			t.Fatalf("version %q: header says %v, query says %v", version, nerr, qerr)
		}

		for _, op := range []string{"SendStreamingMessage", "SubscribeToTask", "GetTask"} {
			n, lerr := LastEventID(op, r)
			refusal(t, "last event id", lerr)
			switch {
			case op == "GetTask" && (n != -1 || lerr != nil):
				t.Fatalf("GetTask read Last-Event-ID %q: %d, %v", lastID, n, lerr)
			case lerr == nil && strings.TrimSpace(lastID) != "" && op != "GetTask":
				if want, err := strconv.ParseInt(strings.TrimSpace(lastID), 10, 64); err != nil || n != want || n < 0 ||
					strconv.FormatInt(n, 10) != strings.TrimSpace(lastID) {
					t.Fatalf("Last-Event-ID %q read as %d", lastID, n)
				}
			case lerr == nil && n < -1:
				t.Fatalf("Last-Event-ID %q read as %d", lastID, n)
			}
		}

		if cerr := CheckContentType(r); cerr == nil {
			mt, _, _ := strings.Cut(strings.ToLower(ct), ";")
			if mt = strings.TrimSpace(mt); mt != "application/json" && mt != "application/a2a+json" {
				t.Fatalf("Content-Type %q accepted", ct)
			}
		} else {
			refusal(t, "content type", cerr)
		}
	})
}
