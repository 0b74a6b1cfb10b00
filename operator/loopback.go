package operator

import (
	"net/http"
	"strings"

	"github.com/channels-dev/channels/internal/netguard"
)

// LoopbackHosts guards the trust a loopback listener gives requests without credentials
// (anonymous A2A callers, the admin pages and /metrics without a token) against DNS rebinding:
// a web page whose name the attacker re-points at 127.0.0.1 reaches a loopback listener from
// the browser, but its requests carry the attacker's name in Host. Such a request is refused
// with 421 unless its Host is a loopback name or address, or public (the public URL's host),
// whatever headers it carries (a page can add an Authorization header of its own). The public
// host passes this guard only: it is how A2A clients reach the server through a reverse proxy,
// and Server opens the operator pages without a token to loopback names alone. Exempt are
// the routes that authenticate by other means or serve nothing private: the ones mux routes to
// a pattern under /sources/ (provider webhooks, which check their signatures), /healthz,
// /readyz (its details go only to the operator, see Server) and the public agent card.
//
// refuse, when not nil, answers a refused request in its own format (A2A clients read errors
// as JSON); it is handed the refusal's message and must answer 421 Misdirected Request. A nil
// refuse, or one that declines (returns false), leaves the answer to the guard: that message
// as text.
func LoopbackHosts(mux *http.ServeMux, public string, refuse func(w http.ResponseWriter, r *http.Request, msg string) bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The Host check first: it is cheap and passes every local request; only a foreign name
		// pays for the mux lookup of exempt.
		if !LoopbackHost(r.Host, public) && !exempt(mux, r) {
			if refuse == nil || !refuse(w, r, MisdirectedMessage) {
				http.Error(w, MisdirectedMessage, http.StatusMisdirectedRequest)
			}
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// MisdirectedMessage is what LoopbackHosts tells a request it refuses.
const MisdirectedMessage = "this server trusts requests only under its loopback names " +
	"(localhost, *.localhost, 127.0.0.0/8, [::1]) and its public_url host"

// exempt reports whether r is for a route the Host guard leaves alone.
func exempt(mux *http.ServeMux, r *http.Request) bool {
	switch r.URL.Path {
	case "/healthz", "/readyz", "/.well-known/agent-card.json":
		return true
	}
	// The route the mux picks, not the path: anything under /sources/ that no source registered
	// falls through to the A2A catch-all, which must stay guarded.
	_, pattern := mux.Handler(r)
	if _, path, ok := strings.Cut(pattern, " "); ok {
		pattern = path
	}
	return strings.HasPrefix(pattern, "/sources/")
}

// LoopbackHost reports whether hostport (a Host header) names this machine's loopback interface
// or, when public is not "", the public URL's host.
func LoopbackHost(hostport, public string) bool { return netguard.LoopbackHost(hostport, public) }
