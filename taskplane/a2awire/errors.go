package a2awire

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/channels-dev/channels/taskplane"
)

// Domain is the google.rpc.ErrorInfo domain of every error Channels emits.
const Domain = "a2a-protocol.org"

// Protocol error kinds. Compare with errors.Is; the concrete error is *Error.
var (
	ErrTaskNotFound                   = errors.New("task not found")
	ErrTaskNotCancelable              = errors.New("task cannot be canceled")
	ErrPushNotificationNotSupported   = errors.New("push notifications are not supported")
	ErrUnsupportedOperation           = errors.New("unsupported operation")
	ErrContentTypeNotSupported        = errors.New("content type not supported")
	ErrInvalidAgentResponse           = errors.New("invalid agent response")
	ErrExtendedAgentCardNotConfigured = errors.New("extended agent card not configured")
	ErrExtensionSupportRequired       = errors.New("extension support required")
	ErrVersionNotSupported            = errors.New("protocol version not supported")

	ErrInvalidParams  = errors.New("invalid params")
	ErrInvalidRequest = errors.New("invalid request")
	ErrParse          = errors.New("parse error")
	ErrMethodNotFound = errors.New("method not found")
	// ErrMethodNotAllowed: a REST route exists but not for this HTTP method.
	ErrMethodNotAllowed = errors.New("method not allowed")
	ErrInternal         = errors.New("internal error")
	ErrUnavailable      = errors.New("service unavailable")
	// ErrResourceExhausted: a bound on concurrent work (open streams) is reached; retry later.
	ErrResourceExhausted = errors.New("resource exhausted")

	ErrUnauthenticated  = errors.New("unauthenticated")
	ErrPermissionDenied = errors.New("permission denied")
	// ErrMisdirected refuses a request whose Host this server does not answer to (the loopback
	// listener's guard against DNS rebinding).
	ErrMisdirected = errors.New("misdirected request")

	// ErrDuplicateMessageID is a Channels error: a messageId was reused with a different
	// payload. It is never a silent replay.
	ErrDuplicateMessageID = errors.New("messageId was already used with a different payload")
)

// Kind describes how one error kind appears on each binding.
type Kind struct {
	Err        error
	Reason     string // google.rpc.ErrorInfo reason
	HTTPStatus int
	GRPCStatus string // canonical code name, also the REST envelope's "status"
	RPCCode    int    // JSON-RPC error code
}

// Kinds is the error table (A2A v1.0.1 §4, plus the SDK conventions for generic errors and the
// Channels DUPLICATE_MESSAGE_ID).
var Kinds = []Kind{
	{ErrTaskNotFound, "TASK_NOT_FOUND", http.StatusNotFound, "NOT_FOUND", -32001},
	{ErrTaskNotCancelable, "TASK_NOT_CANCELABLE", http.StatusBadRequest, "FAILED_PRECONDITION", -32002},
	{ErrPushNotificationNotSupported, "PUSH_NOTIFICATION_NOT_SUPPORTED", http.StatusBadRequest, "FAILED_PRECONDITION", -32003},
	{ErrUnsupportedOperation, "UNSUPPORTED_OPERATION", http.StatusBadRequest, "FAILED_PRECONDITION", -32004},
	{ErrContentTypeNotSupported, "CONTENT_TYPE_NOT_SUPPORTED", http.StatusBadRequest, "INVALID_ARGUMENT", -32005},
	{ErrInvalidAgentResponse, "INVALID_AGENT_RESPONSE", http.StatusInternalServerError, "INTERNAL", -32006},
	{ErrExtendedAgentCardNotConfigured, "EXTENDED_AGENT_CARD_NOT_CONFIGURED", http.StatusBadRequest, "FAILED_PRECONDITION", -32007},
	{ErrExtensionSupportRequired, "EXTENSION_SUPPORT_REQUIRED", http.StatusBadRequest, "FAILED_PRECONDITION", -32008},
	{ErrVersionNotSupported, "VERSION_NOT_SUPPORTED", http.StatusBadRequest, "FAILED_PRECONDITION", -32009},
	{ErrInvalidParams, "INVALID_PARAMS", http.StatusBadRequest, "INVALID_ARGUMENT", -32602},
	{ErrInvalidRequest, "INVALID_REQUEST", http.StatusBadRequest, "INVALID_ARGUMENT", -32600},
	{ErrParse, "PARSE_ERROR", http.StatusBadRequest, "INVALID_ARGUMENT", -32700},
	{ErrMethodNotFound, "METHOD_NOT_FOUND", http.StatusNotFound, "NOT_FOUND", -32601},
	{ErrMethodNotAllowed, "METHOD_NOT_ALLOWED", http.StatusMethodNotAllowed, "UNIMPLEMENTED", -32601},
	{ErrInternal, "INTERNAL_ERROR", http.StatusInternalServerError, "INTERNAL", -32603},
	{ErrUnavailable, "UNAVAILABLE", http.StatusServiceUnavailable, "UNAVAILABLE", -32603},
	{ErrResourceExhausted, "RESOURCE_EXHAUSTED", http.StatusTooManyRequests, "RESOURCE_EXHAUSTED", -32603},
	{ErrUnauthenticated, "UNAUTHENTICATED", http.StatusUnauthorized, "UNAUTHENTICATED", -31401},
	{ErrPermissionDenied, "PERMISSION_DENIED", http.StatusForbidden, "PERMISSION_DENIED", -31403},
	{ErrMisdirected, "MISDIRECTED_REQUEST", http.StatusMisdirectedRequest, "PERMISSION_DENIED", -31403},
	{ErrDuplicateMessageID, "DUPLICATE_MESSAGE_ID", http.StatusConflict, "ALREADY_EXISTS", -32602},
}

// KindOf returns the table entry for err (ErrInternal's when none matches).
func KindOf(err error) Kind {
	for _, k := range Kinds {
		if errors.Is(err, k.Err) {
			return k
		}
	}
	return internalKind
}

var internalKind = Kind{ErrInternal, "INTERNAL_ERROR", http.StatusInternalServerError, "INTERNAL", -32603}

// FieldViolation is one entry of a google.rpc.BadRequest detail.
type FieldViolation struct {
	Field       string `json:"field"`
	Description string `json:"description"`
}

// Error is a protocol error: a kind from the table, a message for the caller, ErrorInfo metadata
// and, for invalid params, the offending fields.
type Error struct {
	Kind       error
	Message    string
	Metadata   map[string]string
	Violations []FieldViolation
	// RetryAfter, when set, is sent as the HTTP Retry-After of a REST error.
	RetryAfter time.Duration

	storeOutage bool // FromError made it of a store outage (see StoreOutage)
}

// StoreOutage reports whether FromError made e of the store's failure to serve the request (the
// database unreachable, restarting, read-only), not of an answer to it.
func (e *Error) StoreOutage() bool { return e.storeOutage }

// Error returns the message.
func (e *Error) Error() string { return e.Message }

// Unwrap returns the kind, so errors.Is(err, ErrTaskNotFound) works.
func (e *Error) Unwrap() error { return e.Kind }

// Errorf returns an *Error of kind with a formatted message.
func Errorf(kind error, format string, args ...any) *Error {
	return &Error{Kind: kind, Message: fmt.Sprintf(format, args...)}
}

// ExcerptBytes bounds what an error message repeats of a value the client sent (a path, a
// header, a method name), so that an answer never grows with what it refuses.
const ExcerptBytes = 128

// Excerpt is s as an error message repeats it: whole up to ExcerptBytes, else its first
// ExcerptBytes (whole UTF-8 characters) and "…".
func Excerpt(s string) string {
	if len(s) <= ExcerptBytes {
		return s
	}
	return strings.ToValidUTF8(s[:ExcerptBytes], "") + "…"
}

// Invalid returns an InvalidParams error naming the offending field (field "" for a limit of the
// whole request, which has no field violation).
func Invalid(field, format string, args ...any) *Error {
	d := fmt.Sprintf(format, args...)
	msg := d
	if field != "" {
		msg = field + ": " + d
	}
	e := &Error{Kind: ErrInvalidParams, Message: msg}
	if field != "" { // a whole-request limit (body size, nesting) names no field
		e.Violations = []FieldViolation{{Field: field, Description: d}}
	}
	return e
}

// WithTask returns e with the taskId in its ErrorInfo metadata.
func (e *Error) WithTask(taskID string) *Error {
	if taskID == "" {
		return e
	}
	c := *e
	c.Metadata = map[string]string{}
	for k, v := range e.Metadata {
		c.Metadata[k] = v
	}
	c.Metadata["taskId"] = taskID
	return &c
}

// StoreRetryAfter is the Retry-After of an error answering a request the store could not serve
// (taskplane.StoreUnavailable): a database restart or failover takes seconds.
const StoreRetryAfter = 5 * time.Second

// ConcurrentRetryAfter is the Retry-After of an error answering a request that met another in
// progress for the same message or task (its transaction takes milliseconds).
const ConcurrentRetryAfter = time.Second

// FromError turns any error into a protocol error. A *Error is returned as is; the task plane's
// sentinels map by errors.Is; a store that is unavailable (taskplane.StoreUnavailable) is
// UNAVAILABLE, with Retry-After; anything else is an internal error whose text is not shown to the
// caller (log it before converting).
func FromError(err error) *Error {
	if err == nil {
		return nil
	}
	var we *Error
	if errors.As(err, &we) {
		return we
	}
	switch {
	case errors.Is(err, taskplane.ErrTaskNotFound):
		return Errorf(ErrTaskNotFound, "task not found")
	case errors.Is(err, taskplane.ErrTaskNotCancelable):
		return Errorf(ErrTaskNotCancelable, "task is in a terminal state and cannot be canceled")
	case errors.Is(err, taskplane.ErrTaskTerminal):
		return Errorf(ErrUnsupportedOperation, "task is in a terminal state; send a new message without taskId (optionally naming it in referenceTaskIds)")
	case errors.Is(err, taskplane.ErrDuplicateConflict):
		return Errorf(ErrDuplicateMessageID, "messageId was already used with a different payload")
	case errors.Is(err, taskplane.ErrContextMismatch):
		return Invalid("message.contextId", "does not match the context of message.taskId")
	case errors.Is(err, taskplane.ErrInvalid):
		return Errorf(ErrInvalidParams, "%s", err.Error())
	case errors.Is(err, taskplane.ErrClaimPending), errors.Is(err, taskplane.ErrConcurrentModification):
		e := Errorf(ErrUnavailable, "a concurrent request for the same message is in progress; retry")
		e.RetryAfter = ConcurrentRetryAfter
		return e
	case errors.Is(err, context.DeadlineExceeded):
		return Errorf(ErrUnavailable, "deadline exceeded")
	case errors.Is(err, context.Canceled):
		return Errorf(ErrUnavailable, "request canceled")
	case taskplane.StoreUnavailable(err):
		// Never the store's text: it may name the database's host, user and database.
		e := Errorf(ErrUnavailable, "the task store is unavailable; retry later")
		e.RetryAfter, e.storeOutage = StoreRetryAfter, true
		return e
	}
	return Errorf(ErrInternal, "internal error")
}

// ErrorInfoType and BadRequestType are the @type URLs of the details Channels emits.
const (
	ErrorInfoType  = "type.googleapis.com/google.rpc.ErrorInfo"
	BadRequestType = "type.googleapis.com/google.rpc.BadRequest"
)

// details returns the google.protobuf.Any details of e: ErrorInfo first, then BadRequest.
func (e *Error) details(now time.Time) []any {
	k := KindOf(e)
	md := map[string]string{"timestamp": now.UTC().Format(time.RFC3339)}
	for key, v := range e.Metadata {
		md[key] = v
	}
	out := []any{map[string]any{"@type": ErrorInfoType, "reason": k.Reason, "domain": Domain, "metadata": md}}
	if len(e.Violations) > 0 {
		out = append(out, map[string]any{"@type": BadRequestType, "fieldViolations": e.Violations})
	}
	return out
}

// RESTBody is the AIP-193 envelope of e: {"error":{code,status,message,details}}.
func (e *Error) RESTBody() []byte {
	k := KindOf(e)
	b, err := json.Marshal(map[string]any{"error": map[string]any{
		"code": k.HTTPStatus, "status": k.GRPCStatus, "message": e.Message, "details": e.details(time.Now()),
	}})
	if err != nil {
		panic(fmt.Sprintf("a2awire: encode error: %v", err))
	}
	return b
}

// RPCError is a JSON-RPC 2.0 error object; Data is an array of google.protobuf.Any details.
type RPCError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    []any  `json:"data,omitempty"`
}

// RPC returns e as a JSON-RPC error object.
func (e *Error) RPC() *RPCError {
	return &RPCError{Code: KindOf(e).RPCCode, Message: e.Message, Data: e.details(time.Now())}
}
