package operator

import (
	"net"
	"net/http"
	"strings"
)

// LoopbackHosts guards the trust a loopback listener gives requests without credentials
// (anonymous A2A callers, the admin pages without a token) against DNS rebinding: a web page
// whose name the attacker re-points at 127.0.0.1 reaches a loopback listener from the browser,
// but its requests carry the attacker's name in Host. Such a request is refused with 421 unless
// its Host is a loopback name or address, or the host of public (the public URL). Requests with
// an Authorization header are left to their authentication, as are the paths that authenticate
// by other means (provider signatures under /sources/) or serve nothing private (health and the
// public agent card).
func LoopbackHosts(next http.Handler, public string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "" && !exemptPath(r.URL.Path) && !loopbackHost(r.Host, public) {
			http.Error(w, "this server trusts requests without credentials only on its loopback names "+
				"(localhost, 127.0.0.1, [::1]) and its public_url host", http.StatusMisdirectedRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func exemptPath(p string) bool {
	return strings.HasPrefix(p, "/sources/") || strings.HasPrefix(p, "/.well-known/") || p == "/healthz" || p == "/readyz"
}

// loopbackHost reports whether hostport (a Host header) names this machine's loopback interface or
// the public URL's host.
func loopbackHost(hostport, public string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return true
	}
	return public != "" && host == strings.ToLower(public)
}
