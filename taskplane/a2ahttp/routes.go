package a2ahttp

import (
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/channels-dev/channels/taskplane/a2aservice"
	"github.com/channels-dev/channels/taskplane/a2awire"
)

// routeMatch is a resolved REST route: the operation, the methods it accepts, and the task id
// from the path.
type routeMatch struct {
	op      string
	methods []string
	id      string // the task id of a tasks/{id} route
	// idField names id as JSON-RPC's params do ("id", or "taskId" where a config id is "id");
	// configID is a push config's id.
	idField, configID string
	// push marks the push-config routes, unsupported as a whole when the server offers no push.
	push  bool
	serve func(s *Server, w http.ResponseWriter, r *http.Request, call a2aservice.Call, id string) error
}

// checkIDs refuses a path id longer than the ids a request body may carry (MaxIDBytes), as
// JSON-RPC does, without echoing it.
func (rt routeMatch) checkIDs(maxID int) *a2awire.Error {
	if len(rt.id) > maxID {
		return a2awire.Invalid(rt.idField, "longer than %d bytes", maxID)
	}
	if len(rt.configID) > maxID {
		return a2awire.Invalid("id", "longer than %d bytes", maxID)
	}
	return nil
}

func (rt routeMatch) allows(method string) bool { return slices.Contains(rt.methods, method) }

// pathSegments splits an escaped path (r.URL.EscapedPath) at its slashes, leading slash aside,
// and decodes each segment on its own, so that a %2F stays inside its segment: the segments as
// sent (raw) and decoded (segs), index for index. ok is false for a malformed escape, which
// net/http refuses before a handler sees it.
func pathSegments(escaped string) (raw, segs []string, ok bool) {
	raw = strings.Split(strings.TrimPrefix(escaped, "/"), "/")
	segs = make([]string, len(raw))
	for i, r := range raw {
		seg, err := url.PathUnescape(r)
		if err != nil {
			return nil, nil, false
		}
		segs[i] = seg
	}
	return raw, segs, true
}

// restRoute resolves a REST path, given as pathSegments' raw and decoded segments with the
// public URL's path removed: empty segments at either end are ignored (/tasks/ is /tasks), and
// the first of two or more segments is the tenant unless it is one of the roots.
func restRoute(raw, segs []string) (tenant string, rt routeMatch, ok bool) {
	for len(segs) > 0 && segs[0] == "" {
		raw, segs = raw[1:], segs[1:]
	}
	for len(segs) > 0 && segs[len(segs)-1] == "" {
		raw, segs = raw[:len(raw)-1], segs[:len(segs)-1]
	}
	if len(segs) > 1 && !roots[segs[0]] {
		tenant, raw, segs = segs[0], raw[1:], segs[1:]
	}
	rt, ok = route(raw, segs)
	return tenant, rt, ok
}

// route resolves the path segments (tenant already removed), as sent (raw) and decoded (segs).
// Go's ServeMux cannot match the custom verbs of "tasks/{id}:cancel", so the last segment is
// split by hand, at its first colon as sent: a colon escaped as %3A belongs to the id.
func route(raw, segs []string) (routeMatch, bool) {
	get, post := []string{http.MethodGet}, []string{http.MethodPost}
	switch {
	case len(segs) == 1 && segs[0] == "message:send":
		return routeMatch{op: "SendMessage", methods: post, serve: (*Server).sendMessage}, true
	case len(segs) == 1 && segs[0] == "message:stream":
		return routeMatch{op: "SendStreamingMessage", methods: post, serve: (*Server).sendStreamingMessage}, true
	case len(segs) == 1 && segs[0] == "tasks":
		return routeMatch{op: "ListTasks", methods: get, serve: (*Server).listTasks}, true
	case len(segs) == 1 && segs[0] == "extendedAgentCard":
		return routeMatch{op: "GetExtendedAgentCard", methods: get, serve: (*Server).extendedCard}, true
	case len(segs) == 2 && segs[0] == "tasks" && segs[1] != "":
		rawID, rawVerb, hasVerb := strings.Cut(raw[1], ":")
		// Both halves decode: a colon is never inside an escape of the segment, which decoded.
		id, _ := url.PathUnescape(rawID)
		verb, _ := url.PathUnescape(rawVerb)
		if id == "" {
			return routeMatch{}, false
		}
		if !hasVerb {
			return routeMatch{op: "GetTask", methods: get, id: id, idField: "id", serve: (*Server).getTask}, true
		}
		switch verb { // an empty verb ("/tasks/{id}:") is no route
		case "cancel":
			return routeMatch{op: "CancelTask", methods: post, id: id, idField: "id", serve: (*Server).cancelTask}, true
		case "subscribe":
			return routeMatch{op: "SubscribeToTask", methods: []string{http.MethodGet, http.MethodPost}, id: id, idField: "id", serve: (*Server).subscribe}, true
		}
	case len(segs) == 3 && segs[0] == "tasks" && segs[1] != "" && segs[2] == "pushNotificationConfigs":
		return routeMatch{op: "PushNotificationConfigs", methods: []string{http.MethodGet, http.MethodPost}, id: segs[1], idField: "taskId",
			push: true, serve: (*Server).pushConfigs}, true
	case len(segs) == 4 && segs[0] == "tasks" && segs[1] != "" && segs[2] == "pushNotificationConfigs" && segs[3] != "":
		configID := segs[3]
		return routeMatch{op: "PushNotificationConfig", methods: []string{http.MethodGet, http.MethodDelete}, id: segs[1],
			idField: "taskId", configID: configID, push: true, serve: func(s *Server, w http.ResponseWriter, r *http.Request, call a2aservice.Call, id string) error {
				return s.pushConfig(w, r, call, id, configID)
			}}, true
	}
	return routeMatch{}, false
}

// decodeSend reads and decodes a SendMessageRequest body.
func (s *Server) decodeSend(r *http.Request, call *a2aservice.Call) (*a2awire.SendMessageRequest, *a2awire.Error) {
	body, err := s.readBody(r)
	if err != nil {
		return nil, err
	}
	if body == nil {
		return nil, a2awire.Invalid("message", "is required")
	}
	req, err := a2awire.DecodeSendMessageRequest(body, s.svc.Limits())
	if err != nil {
		return nil, err
	}
	// The path's tenant wins over the body's.
	if call.Tenant != "" {
		req.Tenant = call.Tenant
	}
	call.Tenant = req.Tenant
	return req, nil
}

func (s *Server) sendMessage(w http.ResponseWriter, r *http.Request, call a2aservice.Call, id string) error {
	req, werr := s.decodeSend(r, &call)
	if werr != nil {
		return werr
	}
	resp, err := s.svc.SendMessage(r.Context(), call, req)
	if err != nil {
		// As JSON-RPC does, the error names the task the message named.
		return s.svc.WireError(r.Context(), "SendMessage", err).WithTask(req.Message.TaskID)
	}
	s.writeJSON(w, resp)
	return nil
}

func (s *Server) sendStreamingMessage(w http.ResponseWriter, r *http.Request, call a2aservice.Call, id string) error {
	req, werr := s.decodeSend(r, &call)
	if werr != nil {
		return werr
	}
	st, err := s.svc.SendStreamingMessage(r.Context(), call, req)
	if err != nil {
		return s.svc.WireError(r.Context(), "SendStreamingMessage", err).WithTask(req.Message.TaskID)
	}
	s.svc.ServeSSE(w, r, st, restEncoder{})
	return nil
}

func (s *Server) getTask(w http.ResponseWriter, r *http.Request, call a2aservice.Call, id string) error {
	hl, werr := a2awire.HistoryLengthFromQuery(r.URL.Query())
	if werr != nil {
		return werr
	}
	t, err := s.svc.GetTask(r.Context(), call, &a2awire.GetTaskRequest{Tenant: call.Tenant, ID: id, HistoryLength: hl})
	if err != nil {
		return err
	}
	s.writeJSON(w, t)
	return nil
}

func (s *Server) listTasks(w http.ResponseWriter, r *http.Request, call a2aservice.Call, id string) error {
	req, werr := a2awire.ListTasksFromQuery(r.URL.Query(), s.svc.Limits())
	if werr != nil {
		return werr
	}
	resp, err := s.svc.ListTasks(r.Context(), call, req)
	if err != nil {
		return err
	}
	s.writeJSON(w, resp)
	return nil
}

func (s *Server) cancelTask(w http.ResponseWriter, r *http.Request, call a2aservice.Call, id string) error {
	body, werr := s.readBody(r)
	if werr != nil {
		return werr
	}
	req, werr := a2awire.DecodeCancelTaskRequest(body, s.svc.Limits())
	if werr != nil {
		return werr
	}
	req.ID = id // the path wins
	if call.Tenant == "" {
		call.Tenant = req.Tenant // a field the path does not bind comes from the body, as on send
	}
	t, err := s.svc.CancelTask(r.Context(), call, req)
	if err != nil {
		return err
	}
	s.writeJSON(w, t)
	return nil
}

// subscribe serves GET (as the proto annotates) and POST (as the spec prose says); a POST body
// is ignored.
func (s *Server) subscribe(w http.ResponseWriter, r *http.Request, call a2aservice.Call, id string) error {
	st, err := s.svc.SubscribeToTask(r.Context(), call, &a2awire.SubscribeToTaskRequest{Tenant: call.Tenant, ID: id})
	if err != nil {
		return err
	}
	s.svc.ServeSSE(w, r, st, restEncoder{})
	return nil
}

// pushConfigs serves POST (CreateTaskPushNotificationConfig: the body is the config, the path's
// taskId wins) and GET (ListTaskPushNotificationConfigs, paged by query parameters).
func (s *Server) pushConfigs(w http.ResponseWriter, r *http.Request, call a2aservice.Call, taskID string) error {
	if err := s.svc.PushSupported(); err != nil {
		return err
	}
	if r.Method == http.MethodGet {
		req, werr := a2awire.ListTaskPushConfigsFromQuery(taskID, r.URL.Query(), s.svc.Limits())
		if werr != nil {
			return werr
		}
		resp, err := s.svc.ListPushConfigs(r.Context(), call, req)
		if err != nil {
			return err
		}
		s.writeJSON(w, resp)
		return nil
	}
	body, werr := s.readBody(r)
	if werr != nil {
		return werr
	}
	req, werr := a2awire.DecodeTaskPushNotificationConfig(body, "", s.svc.Limits())
	if werr != nil {
		return werr
	}
	req.TaskID = taskID
	if call.Tenant == "" {
		call.Tenant = req.Tenant // as on cancel
	}
	resp, err := s.svc.CreatePushConfig(r.Context(), call, req)
	if err != nil {
		return err
	}
	s.writeJSON(w, resp)
	return nil
}

// pushConfig serves GET (GetTaskPushNotificationConfig) and DELETE
// (DeleteTaskPushNotificationConfig, answered with {}).
func (s *Server) pushConfig(w http.ResponseWriter, r *http.Request, call a2aservice.Call, taskID, configID string) error {
	req := &a2awire.TaskPushConfigRequest{Tenant: call.Tenant, TaskID: taskID, ID: configID}
	if r.Method == http.MethodDelete {
		if err := s.svc.DeletePushConfig(r.Context(), call, req); err != nil {
			return err
		}
		s.writeJSON(w, struct{}{})
		return nil
	}
	resp, err := s.svc.GetPushConfig(r.Context(), call, req)
	if err != nil {
		return err
	}
	s.writeJSON(w, resp)
	return nil
}

func (s *Server) extendedCard(w http.ResponseWriter, r *http.Request, call a2aservice.Call, id string) error {
	_, doc, err := s.svc.ExtendedCard(call.Principal)
	if err != nil {
		if errors.Is(err, a2awire.ErrUnauthenticated) { // not when this server has no extended card
			a2aservice.SetChallenge(w, err)
		}
		return err
	}
	writeCard(w, r, doc, "private")
	return nil
}
