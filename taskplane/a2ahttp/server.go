// Package a2ahttp is the HTTP face of Channels' A2A v1 server: the HTTP+JSON (REST) binding at
// the public URL's root, the agent card at /.well-known/agent-card.json, and the JSON-RPC
// binding (package a2ajsonrpc) mounted at /jsonrpc. Both bindings share one a2aservice.Service
// for authentication, negotiation, the operations and SSE.
//
// Mount the Server at the root of the listener (or of PublicURL's path) and call Close when the
// HTTP server shuts down, so open streams end and http.Server.Shutdown can drain:
//
//	srv, err := a2ahttp.NewServer(plane, dispatcher, executor, a2ahttp.Config{PublicURL: u})
//	hs := &http.Server{Addr: addr, Handler: srv}
//	hs.RegisterOnShutdown(srv.Close)
//
// Shut down in this order: the HTTP server (hs.Shutdown, which calls srv.Close), then the
// Dispatcher (cancel its Run's context: turns it interrupts go back to the queue), then the
// store. A send accepted while no Dispatcher runs waits for its turn until BlockingTimeout. A
// store closed first ends the streams and blocking waits in flight (a blocking send answers the
// task as it was accepted) and answers new requests 503.
package a2ahttp

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/channels-dev/channels/internal/boundedwrite"
	"github.com/channels-dev/channels/taskplane"
	"github.com/channels-dev/channels/taskplane/a2ajsonrpc"
	"github.com/channels-dev/channels/taskplane/a2aservice"
	"github.com/channels-dev/channels/taskplane/a2awire"
)

// Config configures the server; see a2aservice.Config for the fields.
type Config = a2aservice.Config

// Credential maps a bearer token to a principal.
type Credential = a2aservice.Credential

// LoadCredentials reads {"credentials":[{"token":"…","principal":"…"}]} from path.
func LoadCredentials(path string) ([]Credential, error) { return a2aservice.LoadCredentials(path) }

// Server serves both A2A bindings and the agent card. It is an http.Handler.
type Server struct {
	svc *a2aservice.Service
	rpc *a2ajsonrpc.Handler
	// base is the public URL's path, as decoded segments (none at the root): a request path under
	// it is routed without it.
	base []string
}

// NewServer returns the A2A server over plane. dispatcher (may be nil) lets a cancel stop a
// running turn; exec (may be nil) answers direct replies (taskplane.DirectResponder) and hears
// cancels (taskplane.Canceler).
func NewServer(plane *taskplane.Plane, dispatcher *taskplane.Dispatcher, exec taskplane.Executor, cfg Config) (*Server, error) {
	svc, err := a2aservice.New(plane, dispatcher, exec, cfg)
	if err != nil {
		return nil, err
	}
	s := &Server{svc: svc, rpc: a2ajsonrpc.NewHandler(svc)}
	u, err := url.Parse(svc.PublicURL()) // checked by a2aservice.New
	if err != nil {
		return nil, err
	}
	if p := strings.Trim(sentPath(u), "/"); p != "" {
		var ok bool
		if _, s.base, ok = pathSegments(p); !ok {
			return nil, fmt.Errorf("a2a server: the public URL's path %q is not a valid escaped path", u.EscapedPath())
		}
	}
	return s, nil
}

// Close ends open streams and blocking waits. Register it with http.Server.RegisterOnShutdown.
func (s *Server) Close() { s.svc.Close() }

// CloseStreams is Close. Handlers that hold long requests (this Server, the worker API) share the
// name, so a shutdown can end them all through one interface{ CloseStreams() }.
func (s *Server) CloseStreams() { s.svc.Close() }

// Service returns the shared service.
func (s *Server) Service() *a2aservice.Service { return s.svc }

// The paths, as decoded segments, of the public agent card and the JSON-RPC binding: exactly
// these, under the public URL's path.
var (
	cardPath    = []string{".well-known", "agent-card.json"}
	jsonrpcPath = []string{strings.TrimPrefix(a2aservice.JSONRPCPath, "/")}
)

// Top-level path segments of the REST binding; any other first segment is a tenant. A tenant
// cannot be named like one of these (decoded: %74asks is tasks).
var roots = map[string]bool{
	"message:send": true, "message:stream": true, "tasks": true, "extendedAgentCard": true,
	".well-known": true, "jsonrpc": true,
	// Not the binding's, but the server's: provider webhooks (sources) and the worker API.
	"sources": true, "worker": true,
}

// ServeHTTP routes a request. It routes on the path as sent, split at its slashes, each segment
// decoded on its own: {tenant} and {id} are one segment each, so a tenant or task id holding a
// "/" arrives as %2F and stays whole (r.URL.Path, decoded at once, would split it).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	sent := sentPath(r.URL)
	raw, segs, ok := pathSegments(sent)
	if ok && len(segs) >= len(s.base) && slices.Equal(segs[:len(s.base)], s.base) {
		raw, segs = raw[len(s.base):], segs[len(s.base):]
	}
	switch {
	case ok && slices.Equal(segs, cardPath):
		s.publicCard(w, r)
		return
	case ok && slices.Equal(segs, jsonrpcPath):
		s.rpc.ServeHTTP(w, r)
		return
	}
	var (
		tenant string
		rt     routeMatch
	)
	if ok {
		tenant, rt, ok = restRoute(raw, segs)
	}
	if !ok {
		writeError(w, a2awire.Errorf(a2awire.ErrMethodNotFound, "no A2A operation at %s", a2awire.Excerpt(sent)))
		return
	}
	if !rt.allows(r.Method) {
		w.Header().Set("Allow", strings.Join(rt.methods, ", "))
		writeError(w, a2awire.Errorf(a2awire.ErrMethodNotAllowed, "%s does not accept %s", a2awire.Excerpt(sent), a2awire.Excerpt(r.Method)))
		return
	}
	call, werr := s.begin(w, r, tenant, rt)
	if werr == nil {
		werr = rt.checkIDs(s.svc.Limits().MaxIDBytes)
	}
	if werr != nil {
		writeError(w, werr)
		return
	}
	if err := rt.serve(s, w, r, call, rt.id); err != nil {
		writeError(w, s.svc.WireError(r.Context(), rt.op, err).WithTask(rt.id))
	}
}

// sentPath is the path of u as the client sent it. That is u.RawPath where it is set, not
// u.EscapedPath: once the path as sent holds a byte EscapedPath would have escaped (a "|", UTF-8),
// EscapedPath escapes the decoded path afresh, and a %2F becomes a slash.
func sentPath(u *url.URL) string {
	if u.RawPath != "" {
		if p, err := url.PathUnescape(u.RawPath); err == nil && p == u.Path {
			return u.RawPath
		}
	}
	return u.EscapedPath()
}

// begin authenticates and negotiates a request for the operation of rt.
func (s *Server) begin(w http.ResponseWriter, r *http.Request, tenant string, rt routeMatch) (a2aservice.Call, *a2awire.Error) {
	principal, err := s.svc.Authenticate(r)
	if err != nil {
		a2aservice.SetChallenge(w, err)
		return a2aservice.Call{}, err
	}
	ext, err := s.svc.Negotiate(r)
	if err != nil {
		return a2aservice.Call{}, err
	}
	a2aservice.SetExtensions(w, ext)
	last, err := a2aservice.LastEventID(rt.op, r)
	if err != nil {
		return a2aservice.Call{}, err
	}
	if rt.push {
		// Without push notifications every push-config operation is unsupported, whatever its
		// path, tenant or body hold, as on JSON-RPC, which does not read a push method's params.
		if err := s.svc.PushSupported(); err != nil {
			return a2aservice.Call{}, a2awire.FromError(err)
		}
	}
	if tenant == "" {
		tenant = r.URL.Query().Get("tenant")
	}
	// The tenant is echoed in every task's locator: bounded like the body's (and JSON-RPC's)
	// tenant, on every route, and not echoed back in the refusal.
	if lim := s.svc.Limits(); len(tenant) > lim.MaxIDBytes {
		return a2aservice.Call{}, a2awire.Invalid("tenant", "longer than %d bytes", lim.MaxIDBytes)
	}
	return a2aservice.Call{Principal: principal, Binding: a2awire.BindingHTTPJSON, Tenant: tenant, Extensions: ext, LastEventID: last}, nil
}

// readBody reads a request body within the size limit, checking Content-Type before anything
// is parsed. An empty body returns nil.
func (s *Server) readBody(r *http.Request) ([]byte, *a2awire.Error) {
	if r.ContentLength > 0 {
		if err := a2aservice.CheckContentType(r); err != nil {
			return nil, err
		}
	}
	lim := s.svc.Limits()
	b, err := io.ReadAll(io.LimitReader(r.Body, lim.MaxBodyBytes+1))
	if err != nil {
		return nil, a2awire.Errorf(a2awire.ErrInvalidRequest, "read request body: %v", err)
	}
	if len(b) == 0 {
		return nil, nil
	}
	if r.ContentLength <= 0 {
		// A body of unknown length: its media type is checked once it is known not to be empty,
		// still before its size.
		if err := a2aservice.CheckContentType(r); err != nil {
			return nil, err
		}
	}
	if int64(len(b)) > lim.MaxBodyBytes {
		return nil, a2awire.Invalid("", "request body larger than %d bytes", lim.MaxBodyBytes)
	}
	if err := a2awire.CheckBody(b, lim); err != nil {
		return nil, err
	}
	return b, nil
}

// writeJSON answers with v, bounded in time like every answer (a2aservice.WriteAnswer).
func (s *Server) writeJSON(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, a2awire.Errorf(a2awire.ErrInternal, "internal error"))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(http.StatusOK)
	s.svc.WriteAnswer(w, b)
}

// Refuse answers r with e, refused before the server saw it (by a guard in front of it), in
// the binding its path names: a JSON-RPC error under a null id at the JSON-RPC path, the AIP-193
// envelope anywhere else. The HTTP status is e's.
func (s *Server) Refuse(w http.ResponseWriter, r *http.Request, e *a2awire.Error) {
	if _, segs, ok := pathSegments(sentPath(r.URL)); ok {
		if len(segs) >= len(s.base) && slices.Equal(segs[:len(s.base)], s.base) {
			segs = segs[len(s.base):]
		}
		if slices.Equal(segs, jsonrpcPath) {
			s.rpc.Refuse(w, e)
			return
		}
	}
	writeError(w, e)
}

func writeError(w http.ResponseWriter, e *a2awire.Error) {
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(e.RetryAfter.Round(time.Second)/time.Second)))
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(a2awire.KindOf(e).HTTPStatus)
	_ = boundedwrite.Write(w, e.RESTBody(), 0)
}

// restEncoder frames HTTP+JSON stream events: the StreamResponse itself; errors as the
// AIP-193 envelope.
type restEncoder struct{}

func (restEncoder) Event(r *a2awire.StreamResponse) ([]byte, error) { return json.Marshal(r) }
func (restEncoder) Error(e *a2awire.Error) []byte                   { return e.RESTBody() }

// publicCard serves the public agent card with caching headers.
func (s *Server) publicCard(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeError(w, a2awire.Errorf(a2awire.ErrMethodNotAllowed, "the agent card accepts GET"))
		return
	}
	w.Header().Set("Access-Control-Allow-Origin", "*")
	writeCard(w, r, s.svc.PublicCard(), "public")
}

func writeCard(w http.ResponseWriter, r *http.Request, doc a2aservice.CardDocument, scope string) {
	h := w.Header()
	h.Set("Cache-Control", scope+", max-age="+strconv.Itoa(int(doc.MaxAge/time.Second)))
	h.Set("ETag", doc.ETag)
	h.Set("Last-Modified", doc.LastModified.Format(http.TimeFormat))
	if scope == "private" {
		h.Add("Vary", "Authorization")
	}
	if notModified(r, doc) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(doc.Body)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_ = boundedwrite.Write(w, doc.Body, 0)
	}
}

// notModified evaluates If-None-Match (weak comparison, as RFC 9110 asks for GET) and, without
// it, If-Modified-Since.
func notModified(r *http.Request, doc a2aservice.CardDocument) bool {
	if inm := r.Header.Get("If-None-Match"); inm != "" {
		for _, tag := range strings.Split(inm, ",") {
			tag = strings.TrimPrefix(strings.TrimSpace(tag), "W/")
			if tag == "*" || tag == doc.ETag {
				return true
			}
		}
		return false
	}
	if ims := r.Header.Get("If-Modified-Since"); ims != "" {
		t, err := http.ParseTime(ims)
		return err == nil && !doc.LastModified.Truncate(time.Second).After(t)
	}
	return false
}
