// Package a2ajsonrpc is the JSON-RPC 2.0 binding of Channels' A2A v1 server: one POST endpoint
// (mounted at /jsonrpc by a2ahttp.Server) whose methods are the v1 operation names. It decodes
// the envelope and params with a2awire and calls the shared a2aservice.Service.
//
// Errors are JSON-RPC error objects with the A2A codes (-32001…-32009) or the standard ones,
// and a data array holding google.rpc.ErrorInfo, sent with HTTP 200 as the SDKs do; only an
// authentication failure is an HTTP 401. Streaming methods answer text/event-stream whose
// data lines are JSON-RPC responses; an error found before the stream starts is one such
// event when the client accepts text/event-stream, else a plain JSON-RPC error.
package a2ajsonrpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/channels-dev/channels/taskplane/a2aservice"
	"github.com/channels-dev/channels/taskplane/a2awire"
)

// Method names of A2A v1.
const (
	MethodSendMessage          = "SendMessage"
	MethodSendStreamingMessage = "SendStreamingMessage"
	MethodGetTask              = "GetTask"
	MethodListTasks            = "ListTasks"
	MethodCancelTask           = "CancelTask"
	MethodSubscribeToTask      = "SubscribeToTask"
	MethodCreatePushConfig     = "CreateTaskPushNotificationConfig"
	MethodGetPushConfig        = "GetTaskPushNotificationConfig"
	MethodListPushConfigs      = "ListTaskPushNotificationConfigs"
	MethodDeletePushConfig     = "DeleteTaskPushNotificationConfig"
	MethodGetExtendedAgentCard = "GetExtendedAgentCard"
)

// methods are the v1 methods this binding serves.
var methods = map[string]bool{
	MethodSendMessage: true, MethodSendStreamingMessage: true, MethodGetTask: true, MethodListTasks: true,
	MethodCancelTask: true, MethodSubscribeToTask: true, MethodCreatePushConfig: true, MethodGetPushConfig: true,
	MethodListPushConfigs: true, MethodDeletePushConfig: true, MethodGetExtendedAgentCard: true,
}

// legacy are the v0.3 method names, answered with a pointer to the v1 name.
var legacy = map[string]string{
	"message/send": MethodSendMessage, "message/stream": MethodSendStreamingMessage,
	"tasks/get": MethodGetTask, "tasks/list": MethodListTasks, "tasks/cancel": MethodCancelTask,
	"tasks/resubscribe": MethodSubscribeToTask, "tasks/pushNotificationConfig/set": MethodCreatePushConfig,
	"tasks/pushNotificationConfig/get": MethodGetPushConfig, "tasks/pushNotificationConfig/list": MethodListPushConfigs,
	"tasks/pushNotificationConfig/delete": MethodDeletePushConfig, "agent/getAuthenticatedExtendedCard": MethodGetExtendedAgentCard,
}

// Handler serves the JSON-RPC binding.
type Handler struct {
	svc *a2aservice.Service
}

// NewHandler returns the JSON-RPC binding over svc.
func NewHandler(svc *a2aservice.Service) *Handler { return &Handler{svc: svc} }

// Request is a decoded JSON-RPC request envelope.
type Request struct {
	// ID is the raw request id (a string, a number, or null), echoed in the response.
	ID     json.RawMessage
	Method string
	Params json.RawMessage
}

var nullID = json.RawMessage("null")

// MaxIDBytes bounds a request's id, as JSON (a string's quotes and escapes included).
const MaxIDBytes = 512

// ParseRequest decodes and validates a JSON-RPC 2.0 request envelope. On failure the returned
// Request still carries the id when it could be read.
func ParseRequest(body []byte) (*Request, *a2awire.Error) {
	req := &Request{ID: nullID}
	body = bytes.TrimSpace(body)
	// Malformed JSON is a parse error whatever its first character (a truncated batch too, as in
	// JSON-RPC 2.0's own examples); a well-formed batch is an invalid request.
	if !json.Valid(body) {
		return req, a2awire.Errorf(a2awire.ErrParse, "request is not valid JSON")
	}
	if body[0] == '[' {
		return req, a2awire.Errorf(a2awire.ErrInvalidRequest, "batch requests are not supported")
	}
	var env map[string]json.RawMessage
	if err := json.Unmarshal(body, &env); err != nil || env == nil {
		// Valid JSON, but a number, string, boolean or null: not a Request object.
		return req, a2awire.Errorf(a2awire.ErrInvalidRequest, "request is not a JSON object")
	}
	if id, ok := env["id"]; ok {
		id = bytes.TrimSpace(id)
		switch {
		case len(id) == 0, string(id) == "null":
		case len(id) > MaxIDBytes:
			// Echoed in the answer and in every event of a stream: bounded like the ids in params.
			return req, a2awire.Errorf(a2awire.ErrInvalidRequest, "id longer than %d bytes", MaxIDBytes)
		case id[0] == '"', id[0] == '-' || (id[0] >= '0' && id[0] <= '9'):
			req.ID = id
		default:
			return req, a2awire.Errorf(a2awire.ErrInvalidRequest, "id must be a string, a number or null")
		}
	}
	var version string
	if err := json.Unmarshal(env["jsonrpc"], &version); err != nil || version != "2.0" {
		return req, a2awire.Errorf(a2awire.ErrInvalidRequest, `jsonrpc must be "2.0"`)
	}
	if err := json.Unmarshal(env["method"], &req.Method); err != nil || req.Method == "" {
		return req, a2awire.Errorf(a2awire.ErrInvalidRequest, "method must be a non-empty string")
	}
	if p, ok := env["params"]; ok {
		p = bytes.TrimSpace(p)
		// Params are checked for a method this binding serves; any other is refused as such
		// once the request's version is known.
		if len(p) > 0 && p[0] != '{' && string(p) != "null" && methods[req.Method] {
			return req, a2awire.Errorf(a2awire.ErrInvalidParams, "params must be an object")
		}
		req.Params = p
	}
	return req, nil
}

type response struct {
	JSONRPC string            `json:"jsonrpc"`
	ID      json.RawMessage   `json:"id"`
	Result  any               `json:"result,omitempty"`
	Error   *a2awire.RPCError `json:"error,omitempty"`
}

func encode(id json.RawMessage, result any, e *a2awire.Error) []byte {
	r := response{JSONRPC: "2.0", ID: id, Result: result}
	if e != nil {
		r.Result, r.Error = nil, e.RPC()
	}
	if r.Error == nil && r.Result == nil {
		r.Result = struct{}{}
	}
	b, err := json.Marshal(r)
	if err != nil {
		b, _ = json.Marshal(response{JSONRPC: "2.0", ID: id, Error: a2awire.Errorf(a2awire.ErrInternal, "internal error").RPC()})
	}
	return b
}

// write answers with b, bounded in time like every answer (a2aservice.WriteAnswer).
func (h *Handler) write(w http.ResponseWriter, status int, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	h.svc.WriteAnswer(w, b)
}

// Refuse answers a request refused before it was read (by a guard in front of the binding): e
// under a null id, with e's HTTP status.
func (h *Handler) Refuse(w http.ResponseWriter, e *a2awire.Error) {
	h.write(w, a2awire.KindOf(e).HTTPStatus, encode(nullID, nil, e))
}

// unauthorized answers an authentication failure: HTTP 401 with the challenge, and the error
// under the request's id.
func (h *Handler) unauthorized(w http.ResponseWriter, id json.RawMessage, e *a2awire.Error) {
	a2aservice.SetChallenge(w, e)
	h.write(w, http.StatusUnauthorized, encode(id, nil, e))
}

// unauthenticatedPeek bounds what is read of an unauthenticated request's body to find its id.
const unauthenticatedPeek = 64 << 10

// readableID is the id of body if it is a request object with a valid id, else null.
func readableID(body []byte) json.RawMessage {
	req, _ := ParseRequest(body)
	return req.ID
}

// readable is the id (as readableID) and the method of body, as far as they can be read: the
// method is "" when the body is no request object with a method.
func readable(body []byte) (json.RawMessage, string) {
	req, _ := ParseRequest(body)
	return req.ID, req.Method
}

func streamingMethod(method string) bool {
	return method == MethodSendStreamingMessage || method == MethodSubscribeToTask
}

// refuse answers e, an error found before the stream of a streaming method could start, for a
// request of method ("" when it cannot be read: a body over the limit, or no request object). A
// client that accepts text/event-stream on a streaming method gets a stream of the one error
// event, since the SDK clients read a streaming method's errors only from the stream; with the
// method unknown, Accept alone decides. Anything else is a plain JSON-RPC error.
func (h *Handler) refuse(w http.ResponseWriter, r *http.Request, id json.RawMessage, method string, e *a2awire.Error) {
	if acceptsSSE(r) && (method == "" || streamingMethod(method)) {
		h.svc.ServeSSE(w, r, errorStream(h.svc), encoder{id: id, pre: e})
		return
	}
	h.write(w, http.StatusOK, encode(id, nil, e))
}

// ServeHTTP serves one JSON-RPC request.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		h.write(w, http.StatusMethodNotAllowed, encode(nullID, nil, a2awire.Errorf(a2awire.ErrInvalidRequest, "JSON-RPC requests use POST")))
		return
	}
	principal, aerr := h.svc.Authenticate(r)
	if aerr != nil {
		// The refusal names the request's id when a short body shows it; a caller not yet
		// trusted gets no more of its body read than that.
		body, _ := io.ReadAll(io.LimitReader(r.Body, unauthenticatedPeek))
		h.unauthorized(w, readableID(body), aerr)
		return
	}
	lim := h.svc.Limits()
	body, rerr := io.ReadAll(io.LimitReader(r.Body, lim.MaxBodyBytes+1))
	if rerr != nil {
		h.refuse(w, r, nullID, "", a2awire.Errorf(a2awire.ErrInvalidRequest, "read request body: %v", rerr))
		return
	}
	// A request refused before it is parsed still gets its id back when the body has one: JSON-RPC
	// answers null only when the id cannot be read. The media type is checked before the size, as
	// before anything else about the body.
	if err := a2aservice.CheckContentType(r); err != nil {
		id, method := readable(body)
		h.refuse(w, r, id, method, err)
		return
	}
	if int64(len(body)) > lim.MaxBodyBytes {
		h.refuse(w, r, nullID, "", a2awire.Invalid("", "request body larger than %d bytes", lim.MaxBodyBytes))
		return
	}
	if err := a2awire.CheckBody(body, lim); err != nil {
		id, method := readable(body)
		h.refuse(w, r, id, method, err)
		return
	}
	req, perr := ParseRequest(body)
	if perr != nil {
		h.refuse(w, r, req.ID, req.Method, perr)
		return
	}
	fail := func(e *a2awire.Error) {
		if errors.Is(e, a2awire.ErrUnauthenticated) {
			// As for a request refused before dispatch (the extended card without credentials).
			h.unauthorized(w, req.ID, e)
			return
		}
		h.refuse(w, r, req.ID, req.Method, e)
	}
	ext, nerr := h.svc.Negotiate(r)
	if nerr != nil {
		fail(nerr)
		return
	}
	if v1, ok := legacy[req.Method]; ok && a2aservice.RequestedVersion(r) == "" {
		// A request that names no version is a v0.3 request to the spec (SPEC §3.6), and its
		// method says the same; with A2A-Version 1.0 it is a v1 request for a method v1 lacks.
		fail(a2awire.Errorf(a2awire.ErrVersionNotSupported,
			"%s is an A2A v0.3 method and the request names no A2A-Version; this server speaks %s: send A2A-Version: %[2]s and use %s",
			req.Method, a2awire.ProtocolVersion, v1))
		return
	}
	a2aservice.SetExtensions(w, ext)
	last, lerr := a2aservice.LastEventID(req.Method, r)
	if lerr != nil {
		fail(lerr)
		return
	}
	call := a2aservice.Call{Principal: principal, Binding: a2awire.BindingJSONRPC, Extensions: ext, LastEventID: last}
	result, st, taskID, err := h.dispatch(r, &call, req)
	if err != nil {
		fail(h.svc.WireError(r.Context(), req.Method, err).WithTask(taskID))
		return
	}
	if st != nil {
		h.svc.ServeSSE(w, r, st, encoder{id: req.ID})
		return
	}
	h.write(w, http.StatusOK, encode(req.ID, result, nil))
}

// dispatch decodes params and runs one method: a result, or a stream for the streaming
// methods. taskID names the task the request was about, for the error's metadata.
func (h *Handler) dispatch(r *http.Request, call *a2aservice.Call, req *Request) (result any, st *a2aservice.Stream, taskID string, err error) {
	ctx, lim := r.Context(), h.svc.Limits()
	switch req.Method {
	case MethodSendMessage, MethodSendStreamingMessage:
		p, werr := a2awire.DecodeSendMessageRequest(req.Params, lim)
		if werr != nil {
			return nil, nil, "", werr
		}
		call.Tenant = p.Tenant
		if req.Method == MethodSendMessage {
			res, err := h.svc.SendMessage(ctx, *call, p)
			return orNil(res, err), nil, p.Message.TaskID, err
		}
		st, err := h.svc.SendStreamingMessage(ctx, *call, p)
		return nil, st, p.Message.TaskID, err
	case MethodGetTask:
		p, werr := a2awire.DecodeGetTaskRequest(req.Params, lim)
		if werr != nil {
			return nil, nil, "", werr
		}
		call.Tenant = p.Tenant
		res, err := h.svc.GetTask(ctx, *call, p)
		return orNil(res, err), nil, p.ID, err
	case MethodListTasks:
		p, werr := a2awire.DecodeListTasksRequest(req.Params, lim)
		if werr != nil {
			return nil, nil, "", werr
		}
		call.Tenant = p.Tenant
		res, err := h.svc.ListTasks(ctx, *call, p)
		return orNil(res, err), nil, "", err
	case MethodCancelTask:
		p, werr := a2awire.DecodeCancelTaskRequest(req.Params, lim)
		if werr != nil {
			return nil, nil, "", werr
		}
		if p.ID == "" {
			return nil, nil, "", a2awire.Invalid("id", "is required")
		}
		call.Tenant = p.Tenant
		res, err := h.svc.CancelTask(ctx, *call, p)
		return orNil(res, err), nil, p.ID, err
	case MethodSubscribeToTask:
		p, werr := a2awire.DecodeSubscribeToTaskRequest(req.Params, lim)
		if werr != nil {
			return nil, nil, "", werr
		}
		call.Tenant = p.Tenant
		st, err := h.svc.SubscribeToTask(ctx, *call, p)
		return nil, st, p.ID, err
	case MethodCreatePushConfig:
		if err := h.svc.PushSupported(); err != nil {
			return nil, nil, "", err
		}
		p, werr := a2awire.DecodeTaskPushNotificationConfig(req.Params, "", lim)
		if werr != nil {
			return nil, nil, "", werr
		}
		call.Tenant = p.Tenant
		res, err := h.svc.CreatePushConfig(ctx, *call, p)
		return orNil(res, err), nil, p.TaskID, err
	case MethodGetPushConfig, MethodDeletePushConfig:
		if err := h.svc.PushSupported(); err != nil {
			return nil, nil, "", err
		}
		p, werr := a2awire.DecodeTaskPushConfigRequest(req.Params, lim)
		if werr != nil {
			return nil, nil, "", werr
		}
		call.Tenant = p.Tenant
		if req.Method == MethodDeletePushConfig {
			return struct{}{}, nil, p.TaskID, h.svc.DeletePushConfig(ctx, *call, p)
		}
		res, err := h.svc.GetPushConfig(ctx, *call, p)
		return orNil(res, err), nil, p.TaskID, err
	case MethodListPushConfigs:
		if err := h.svc.PushSupported(); err != nil {
			return nil, nil, "", err
		}
		p, werr := a2awire.DecodeListTaskPushConfigsRequest(req.Params, lim)
		if werr != nil {
			return nil, nil, "", werr
		}
		call.Tenant = p.Tenant
		res, err := h.svc.ListPushConfigs(ctx, *call, p)
		return orNil(res, err), nil, p.TaskID, err
	case MethodGetExtendedAgentCard:
		if _, werr := a2awire.DecodeTenantRequest(req.Params, lim); werr != nil {
			return nil, nil, "", werr
		}
		card, _, werr := h.svc.ExtendedCard(call.Principal)
		if werr != nil {
			return nil, nil, "", werr
		}
		return card, nil, "", nil
	}
	return nil, nil, "", methodNotFound(req.Method)
}

// methodNotFound is the error for a method this binding does not serve, pointing a v0.3 name at
// its v1 name.
func methodNotFound(method string) *a2awire.Error {
	if v1, ok := legacy[method]; ok {
		return a2awire.Errorf(a2awire.ErrMethodNotFound, "%s is an A2A v0.3 method; this server speaks v1.0: use %s", method, v1)
	}
	return a2awire.Errorf(a2awire.ErrMethodNotFound, "method %q not found", a2awire.Excerpt(method))
}

// orNil keeps a typed nil pointer out of the result.
func orNil[T any](res *T, err error) any {
	if err != nil || res == nil {
		return nil
	}
	return res
}

// acceptsSSE reports whether r accepts text/event-stream, in any of its Accept lines and in any
// case (media types are case-insensitive).
func acceptsSSE(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		if strings.Contains(strings.ToLower(v), "text/event-stream") {
			return true
		}
	}
	return false
}

// encoder frames JSON-RPC stream events. pre, when set, is an error found before the stream
// started, sent as the only event.
type encoder struct {
	id  json.RawMessage
	pre *a2awire.Error
}

func (e encoder) Event(r *a2awire.StreamResponse) ([]byte, error) {
	if e.pre != nil {
		return encode(e.id, nil, e.pre), nil
	}
	return encode(e.id, r, nil), nil
}

func (e encoder) Error(we *a2awire.Error) []byte { return encode(e.id, nil, we) }

// errorStream is a stream of one (empty) event, which encoder{pre: …} turns into the error.
func errorStream(svc *a2aservice.Service) *a2aservice.Stream {
	return svc.OneEventStream(a2aservice.Event{Response: &a2awire.StreamResponse{}})
}
