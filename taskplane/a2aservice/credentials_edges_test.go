package a2aservice

import (
	"crypto/sha256"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
)

func writeCreds(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "credentials.json")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// A credentials file with data after its JSON object is refused, a stray closing brace or
// bracket too (json.Decoder.More, which once checked it, reports false before '}' and ']').
func TestCredentialsWithTrailingDataAreRefused(t *testing.T) {
	for _, tail := range []string{"}", "]", "}}", " ]"} {
		p := writeCreds(t, `{"credentials":[{"token":"0123456789abcdef","principal":"alice"}]}`+tail)
		if _, err := LoadCredentials(p); err == nil {
			t.Errorf("credentials file with %q after the object loaded", tail)
		}
	}
}

// A credential whose token no Authorization header can present (white space around it, which
// Authenticate trims from the presented token) is refused when the file loads, not kept as a
// credential that silently never matches.
func TestACredentialThatCanNeverMatchIsRefusedOrMatches(t *testing.T) {
	p := writeCreds(t, `{"credentials":[{"token":" 0123456789abcdef ","principal":"alice"}]}`)
	creds, err := LoadCredentials(p)
	if err != nil {
		return // refused at load: fine
	}
	s := &Service{}
	for _, c := range creds {
		s.creds = append(s.creds, credential{sum: sha256Sum(c.Token), principal: c.Principal})
	}
	for _, h := range []string{"Bearer  0123456789abcdef ", "Bearer 0123456789abcdef"} {
		r := httptest.NewRequest("GET", "http://127.0.0.1/tasks", nil)
		r.Header.Set("Authorization", h)
		if p, werr := s.Authenticate(r); werr == nil && p == "alice" {
			return
		}
	}
	t.Fatal("a credential whose token has surrounding spaces loaded, and no Authorization header can present it")
}

func sha256Sum(s string) [32]byte { return sha256.Sum256([]byte(s)) }
