package a2aservice

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"os"
	"strconv"
	"strings"
	"unicode"

	"github.com/channels-dev/channels/internal/bearer"
	"github.com/channels-dev/channels/internal/exactjson"
	"github.com/channels-dev/channels/internal/netguard"
	"github.com/channels-dev/channels/taskplane/a2awire"
)

// Header and parameter names of the A2A service parameters Channels reads.
const (
	HeaderVersion     = "A2A-Version"
	HeaderExtensions  = "A2A-Extensions"
	HeaderLastEventID = "Last-Event-ID"
)

// Call is the authenticated, negotiated context of one request.
type Call struct {
	// Principal owns everything the call reads or writes.
	Principal string
	// Binding is a2awire.BindingHTTPJSON or a2awire.BindingJSONRPC.
	Binding string
	// Tenant is the request's opaque tenant (REST path prefix or params.tenant); it is echoed in
	// the task locator and otherwise ignored: scoping is by principal.
	Tenant string
	// Extensions are the activated extensions.
	Extensions a2awire.Extensions
	// LastEventID is the SSE Last-Event-ID the caller resumes after, or -1.
	LastEventID int64
}

var (
	errMissingToken = &a2awire.Error{Kind: a2awire.ErrUnauthenticated, Message: "a bearer token is required"}
	errBadToken     = &a2awire.Error{Kind: a2awire.ErrUnauthenticated, Message: "the bearer token is not valid"}
	errNotBearer    = &a2awire.Error{Kind: a2awire.ErrUnauthenticated, Message: "this server takes a bearer token (Authorization: Bearer ...)"}
	errManyAuth     = &a2awire.Error{Kind: a2awire.ErrUnauthenticated, Message: "a request carries one Authorization header"}
	errCardAuth     = &a2awire.Error{Kind: a2awire.ErrUnauthenticated, Message: "the extended agent card requires a bearer token"}
	errForeignHost  = &a2awire.Error{Kind: a2awire.ErrUnauthenticated,
		Message: "without a token this server answers only under its loopback names (localhost, 127.0.0.1, [::1]) and its public URL's host"}
)

// Authenticate returns the principal of r: the principal of its bearer token, or
// AnonymousPrincipal when r has no Authorization header and anonymous access is allowed (for
// being on loopback: only under a loopback Host or the public URL's, see Config.Loopback).
// Tokens are compared in constant time. On failure call SetChallenge before writing the 401.
//
// Authorization is read whole: a second header is refused rather than ignored (which of two a
// proxy or a client meant cannot be known), and so is an empty one, which is no credential and no
// absence of one either.
func (s *Service) Authenticate(r *http.Request) (string, *a2awire.Error) {
	hs := r.Header.Values("Authorization")
	if len(hs) > 1 {
		return "", errManyAuth
	}
	if len(hs) == 0 {
		switch {
		case !s.anonymous:
			return "", errMissingToken
		case s.loopbackOnly && !netguard.LoopbackHost(r.Host, s.publicURL.Hostname()):
			return "", errForeignHost
		}
		return AnonymousPrincipal, nil
	}
	tok, ok := bearer.Token(hs[0])
	if !ok {
		return "", errNotBearer
	}
	sum := sha256.Sum256([]byte(tok))
	found := ""
	for _, c := range s.creds {
		if subtle.ConstantTimeCompare(sum[:], c.sum[:]) == 1 {
			found = c.principal
		}
	}
	if found == "" {
		return "", errBadToken
	}
	return found, nil
}

// SetChallenge sets WWW-Authenticate for an authentication failure: with the RFC 6750 error
// code for a bearer token that is not valid or a request that is malformed, without one where
// no bearer token was offered (none, or credentials of another scheme; RFC 6750 §3.1).
func SetChallenge(w http.ResponseWriter, err *a2awire.Error) {
	switch err {
	case errBadToken:
		w.Header().Set("WWW-Authenticate", `Bearer realm="channels", error="invalid_token"`)
	case errManyAuth:
		w.Header().Set("WWW-Authenticate", `Bearer realm="channels", error="invalid_request"`)
	default:
		w.Header().Set("WWW-Authenticate", `Bearer realm="channels"`)
	}
}

// Negotiate checks the A2A-Version service parameter (header first, then query parameter) and
// activates the requested extensions Channels supports.
//
// A missing or empty version is treated as 1.0, not 0.3 as the spec says: Channels speaks only
// v1, and a strict reading would refuse every naive v1 client. Patch numbers are ignored; any
// other version is VersionNotSupported.
func (s *Service) Negotiate(r *http.Request) (a2awire.Extensions, *a2awire.Error) {
	if v := RequestedVersion(r); v != "" && !supportedVersion(v) {
		return nil, a2awire.Errorf(a2awire.ErrVersionNotSupported, "A2A-Version %q is not supported; this server speaks %s", a2awire.Excerpt(v), a2awire.ProtocolVersion)
	}
	requested := map[string]bool{}
	for _, h := range r.Header.Values(HeaderExtensions) {
		for _, uri := range strings.Split(h, ",") {
			if uri = strings.TrimSpace(uri); uri != "" {
				requested[uri] = true
			}
		}
	}
	var act a2awire.Extensions
	for _, e := range SupportedExtensions {
		if requested[e.URI] {
			act = append(act, e.URI)
		}
	}
	for _, uri := range s.cfg.RequiredExtensions {
		if !requested[uri] {
			return nil, a2awire.Errorf(a2awire.ErrExtensionSupportRequired, "extension %s is required; activate it with the A2A-Extensions header", uri)
		}
	}
	return act, nil
}

// RequestedVersion is the A2A-Version the request names: its header, else its query parameter;
// "" when it names none (served as 1.0, docs/a2a.md).
func RequestedVersion(r *http.Request) string {
	if v := strings.TrimSpace(r.Header.Get(HeaderVersion)); v != "" {
		return v
	}
	return queryParam(r, HeaderVersion)
}

// queryParam is the value of the service parameter name given as a query parameter: its name
// matched without regard to case, as a service parameter's is (SPEC §3.2.6), the exact spelling
// first; "" when absent.
func queryParam(r *http.Request, name string) string {
	q := r.URL.Query()
	if v := strings.TrimSpace(q.Get(name)); v != "" {
		return v
	}
	for k, vs := range q {
		if strings.EqualFold(k, name) && len(vs) > 0 {
			if v := strings.TrimSpace(vs[0]); v != "" {
				return v
			}
		}
	}
	return ""
}

func supportedVersion(v string) bool {
	parts := strings.Split(v, ".")
	if len(parts) < 2 || len(parts) > 3 {
		return false
	}
	for _, p := range parts {
		if _, err := strconv.ParseUint(p, 10, 32); err != nil {
			return false
		}
	}
	major, _ := strconv.Atoi(parts[0])
	minor, _ := strconv.Atoi(parts[1])
	return major == 1 && minor == 0
}

// SetExtensions echoes the activated extensions in the response.
func SetExtensions(w http.ResponseWriter, ext a2awire.Extensions) {
	if len(ext) > 0 {
		w.Header().Set(HeaderExtensions, strings.Join(ext, ", "))
	}
}

// LastEventID parses the Last-Event-ID header of a streaming operation (op is the v1 method
// name, SendStreamingMessage or SubscribeToTask): -1 when absent. Other operations ignore the
// header, which an SSE client may send with any request.
func LastEventID(op string, r *http.Request) (int64, *a2awire.Error) {
	v := strings.TrimSpace(r.Header.Get(HeaderLastEventID))
	if v == "" || (op != "SendStreamingMessage" && op != "SubscribeToTask") {
		return -1, nil
	}
	// The ids this server sends are plain decimal numbers: "+3" or "003" is none of them.
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || strconv.FormatInt(n, 10) != v {
		return -1, a2awire.Invalid(HeaderLastEventID, "must be an event id this server sent")
	}
	return n, nil
}

// CheckContentType accepts application/json and application/a2a+json (with parameters).
func CheckContentType(r *http.Request) *a2awire.Error {
	ct := r.Header.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	if err == nil && (mt == "application/json" || mt == "application/a2a+json") {
		return nil
	}
	if ct == "" {
		ct = "(none)"
	}
	return a2awire.Errorf(a2awire.ErrContentTypeNotSupported, "Content-Type %s is not supported; use application/json or application/a2a+json", a2awire.Excerpt(ct))
}

// LoadCredentials reads a credentials file: {"credentials":[{"token":"…","principal":"…"}]}. It
// refuses what New refuses (an entry without a token or a principal, the reserved principal
// AnonymousPrincipal, a token given twice), an unknown field at the top or in an entry (a
// misspelt "credentials" would otherwise load as none) and a file with no entries: a configured
// credentials file that yields no token must not read as "no credentials", which on loopback lets
// everyone in. Its errors name entries by index and never quote a token.
func LoadCredentials(path string) ([]Credential, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load credentials: %w", err)
	}
	var f struct {
		Credentials []Credential `json:"credentials"`
	}
	if err := exactjson.UnmarshalStrict(b, &f); err != nil {
		return nil, fmt.Errorf("load credentials %s: %w", path, err)
	}
	if len(f.Credentials) == 0 {
		return nil, fmt.Errorf(`load credentials %s: no entries: want {"credentials":[{"token":"…","principal":"…"}, …]}`, path)
	}
	if err := CheckCredentials(f.Credentials); err != nil {
		return nil, fmt.Errorf("load credentials %s: %w", path, err)
	}
	return f.Credentials, nil
}

// CheckCredentials refuses an entry without a token or a principal, the reserved principal
// AnonymousPrincipal and a token given twice. Its error names every such entry, on one line, and
// never quotes a token.
func CheckCredentials(creds []Credential) error {
	var problems []string
	seen := make(map[string]int, len(creds))
	for i, c := range creds {
		j, dup := seen[c.Token]
		switch {
		case c.Token == "":
			problems = append(problems, fmt.Sprintf("credential %d has no token", i))
		case strings.IndexFunc(c.Token, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0:
			// Authenticate trims the token a caller presents, and a header cannot carry control
			// characters: such a credential would never match. (The token itself is not quoted.)
			problems = append(problems, fmt.Sprintf("credential %d: token has white space or control characters, which no Authorization header presents as written", i))
		case c.Principal == "":
			problems = append(problems, fmt.Sprintf("credential %d has no principal", i))
		case c.Principal == AnonymousPrincipal:
			problems = append(problems, fmt.Sprintf("credential %d: principal %q is reserved for unauthenticated callers", i, AnonymousPrincipal))
		case dup:
			problems = append(problems, fmt.Sprintf("credential %d repeats the token of credential %d", i, j))
		}
		if _, ok := seen[c.Token]; !ok && c.Token != "" {
			seen[c.Token] = i
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}
