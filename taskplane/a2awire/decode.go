package a2awire

import (
	"bytes"
	"encoding/json"
	"net/url"
	"strconv"
	"strings"
)

// envelopeDepth is how deep a request's own structure nests above a data part or a metadata
// object (JSON-RPC envelope, params, message, parts, part).
const envelopeDepth = 8

// CheckBody refuses a request body deeper than the limits allow, before any decoding.
func CheckBody(body []byte, lim Limits) *Error {
	lim = lim.WithDefaults()
	if JSONDepth(body) > lim.MaxDataDepth+envelopeDepth {
		return Invalid("", "request nested deeper than %d levels", lim.MaxDataDepth+envelopeDepth)
	}
	return nil
}

// DecodeSendMessageRequest decodes and validates a SendMessageRequest. The message must come
// from the user (ROLE_USER).
func DecodeSendMessageRequest(raw json.RawMessage, lim Limits) (*SendMessageRequest, *Error) {
	lim = lim.WithDefaults()
	o, err := parseObject(raw, "")
	if err != nil {
		return nil, err
	}
	req := &SendMessageRequest{}
	if req.Tenant, err = o.str("tenant", lim.MaxIDBytes); err != nil {
		return nil, err
	}
	mraw, ok := o.get("message")
	if !ok {
		return nil, Invalid("message", "is required")
	}
	m, err := decodeMessage(mraw, "message", lim)
	if err != nil {
		return nil, err
	}
	if m.Role != RoleUser {
		return nil, Invalid("message.role", "must be ROLE_USER")
	}
	req.Message = *m
	c, present, err := o.child("configuration")
	if err != nil {
		return nil, err
	}
	if present {
		cfg := &req.Configuration
		if cfg.AcceptedOutputModes, err = c.strings("acceptedOutputModes", lim.MaxListItems, 255); err != nil {
			return nil, err
		}
		if cfg.HistoryLength, err = c.int32("historyLength"); err != nil {
			return nil, err
		}
		if cfg.HistoryLength != nil && *cfg.HistoryLength < 0 {
			return nil, Invalid(c.field("historyLength"), "must not be negative")
		}
		ri, riSet, err := c.boolean("returnImmediately")
		if err != nil {
			return nil, err
		}
		cfg.ReturnImmediately = ri
		if !riSet {
			// v1.0-rc clients send "blocking", with the opposite meaning.
			if b, bSet, err := c.boolean("blocking"); err != nil {
				return nil, err
			} else if bSet {
				cfg.ReturnImmediately = !b
			}
		}
		pname := "taskPushNotificationConfig"
		praw, ok := c.get(pname)
		if !ok {
			pname = "pushNotificationConfig"
			praw, ok = c.get(pname)
		}
		if cfg.PushConfig = ok; ok {
			if cfg.PushNotificationConfig, err = DecodeTaskPushNotificationConfig(praw, c.field(pname), lim); err != nil {
				return nil, err
			}
		}
	}
	if req.Metadata, err = o.structValue("metadata", lim); err != nil {
		return nil, err
	}
	return req, nil
}

func decodeMessage(raw json.RawMessage, path string, lim Limits) (*Message, *Error) {
	o, err := parseObject(raw, path)
	if err != nil {
		return nil, err
	}
	m := &Message{}
	if m.MessageID, err = o.required("messageId", lim.MaxIDBytes); err != nil {
		return nil, err
	}
	if m.ContextID, err = o.str("contextId", lim.MaxIDBytes); err != nil {
		return nil, err
	}
	if m.TaskID, err = o.str("taskId", lim.MaxIDBytes); err != nil {
		return nil, err
	}
	rraw, ok := o.get("role")
	if !ok {
		return nil, Invalid(o.field("role"), "is required")
	}
	role, ok := enumValue(rraw, roleNumbers)
	if !ok || role == RoleUnspecified {
		return nil, Invalid(o.field("role"), "must be ROLE_USER or ROLE_AGENT")
	}
	m.Role = role
	parts, _, err := o.array("parts")
	if err != nil {
		return nil, err
	}
	if len(parts) == 0 {
		return nil, Invalid(o.field("parts"), "is required and must hold at least one part")
	}
	if len(parts) > lim.MaxParts {
		return nil, Invalid(o.field("parts"), "more than %d parts", lim.MaxParts)
	}
	m.Parts = make([]Part, 0, len(parts))
	for i, praw := range parts {
		p, err := decodePart(praw, o.field("parts")+"["+strconv.Itoa(i)+"]", lim)
		if err != nil {
			return nil, err
		}
		m.Parts = append(m.Parts, *p)
	}
	if m.Metadata, err = o.structValue("metadata", lim); err != nil {
		return nil, err
	}
	if m.Extensions, err = o.strings("extensions", lim.MaxListItems, 2048); err != nil {
		return nil, err
	}
	if m.ReferenceTaskIDs, err = o.strings("referenceTaskIds", lim.MaxListItems, lim.MaxIDBytes); err != nil {
		return nil, err
	}
	return m, nil
}

func decodePart(raw json.RawMessage, path string, lim Limits) (*Part, *Error) {
	o, err := parseObject(raw, path)
	if err != nil {
		return nil, err
	}
	p := &Part{}
	n := 0
	if _, ok := o.get("text"); ok {
		s, err := o.str("text", lim.MaxTextBytes)
		if err != nil {
			return nil, err
		}
		p.Text = &s
		n++
	}
	if _, ok := o.get("raw"); ok {
		s, err := o.str("raw", lim.MaxRawBytes/3*4+4)
		if err != nil {
			return nil, err
		}
		b, ok := decodeBytes(s)
		if !ok {
			return nil, Invalid(o.field("raw"), "must be base64")
		}
		if len(b) > lim.MaxRawBytes {
			return nil, Invalid(o.field("raw"), "larger than %d bytes", lim.MaxRawBytes)
		}
		if b == nil {
			b = []byte{}
		}
		p.Raw = b
		n++
	}
	if _, ok := o.get("url"); ok {
		s, err := o.str("url", lim.MaxURLBytes)
		if err != nil {
			return nil, err
		}
		if err := checkURL(s); err != "" {
			return nil, Invalid(o.field("url"), "%s", err)
		}
		p.URL = &s
		n++
	}
	if d, ok := o.getRaw("data"); ok {
		d = bytes.TrimSpace(d)
		if len(d) > lim.MaxDataBytes {
			return nil, Invalid(o.field("data"), "larger than %d bytes", lim.MaxDataBytes)
		}
		if JSONDepth(d) > lim.MaxDataDepth {
			return nil, Invalid(o.field("data"), "nested deeper than %d levels", lim.MaxDataDepth)
		}
		// Normalize to the form encoding/json writes (compact, HTML-escaped), so a value reads
		// back byte for byte as it was stored and digests stay stable.
		norm, err := json.Marshal(json.RawMessage(d))
		if err != nil {
			return nil, Invalid(o.field("data"), "must be a JSON value")
		}
		p.Data = json.RawMessage(norm)
		n++
	}
	switch {
	case n == 0:
		return nil, Invalid(path, "must have exactly one of text, raw, url or data")
	case n > 1:
		return nil, Invalid(path, "has more than one of text, raw, url and data")
	}
	if p.Filename, err = o.str("filename", 1024); err != nil {
		return nil, err
	}
	if p.MediaType, err = o.str("mediaType", 255); err != nil {
		return nil, err
	}
	if p.Metadata, err = o.structValue("metadata", lim); err != nil {
		return nil, err
	}
	return p, nil
}

// checkURL validates a url part: an absolute http or https URL. It is never fetched.
func checkURL(s string) string {
	if strings.ContainsAny(s, " \t\r\n") {
		return "must not contain whitespace"
	}
	u, err := url.Parse(s)
	if err != nil {
		return "must be a valid URL"
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "must be an absolute http or https URL"
	}
	if u.Hostname() == "" {
		return "must name a host"
	}
	return ""
}

// DecodeGetTaskRequest decodes GetTask params.
func DecodeGetTaskRequest(raw json.RawMessage, lim Limits) (*GetTaskRequest, *Error) {
	lim = lim.WithDefaults()
	o, err := parseObject(raw, "")
	if err != nil {
		return nil, err
	}
	req := &GetTaskRequest{}
	if req.Tenant, err = o.str("tenant", lim.MaxIDBytes); err != nil {
		return nil, err
	}
	if req.ID, err = o.required("id", lim.MaxIDBytes); err != nil {
		return nil, err
	}
	if req.HistoryLength, err = o.int32("historyLength"); err != nil {
		return nil, err
	}
	if req.HistoryLength != nil && *req.HistoryLength < 0 {
		return nil, Invalid("historyLength", "must not be negative")
	}
	return req, nil
}

// DecodeListTasksRequest decodes ListTasks params.
func DecodeListTasksRequest(raw json.RawMessage, lim Limits) (*ListTasksRequest, *Error) {
	lim = lim.WithDefaults()
	o, err := parseObject(raw, "")
	if err != nil {
		return nil, err
	}
	req := &ListTasksRequest{}
	if req.Tenant, err = o.str("tenant", lim.MaxIDBytes); err != nil {
		return nil, err
	}
	if req.ContextID, err = o.str("contextId", lim.MaxIDBytes); err != nil {
		return nil, err
	}
	if sraw, ok := o.get("status"); ok && !unrecognizedEnum(sraw) {
		st, ok := enumValue(sraw, taskStateNumbers)
		if !ok {
			return nil, Invalid("status", "unknown task state")
		}
		req.Status = st
	}
	if req.PageSize, err = o.int32("pageSize"); err != nil {
		return nil, err
	}
	if req.PageToken, err = o.str("pageToken", 1024); err != nil {
		return nil, err
	}
	if req.HistoryLength, err = o.int32("historyLength"); err != nil {
		return nil, err
	}
	if req.StatusTimestampAfter, err = o.timestamp("statusTimestampAfter"); err != nil {
		return nil, err
	}
	if inc, _, err := o.boolean("includeArtifacts"); err != nil {
		return nil, err
	} else {
		req.IncludeArtifacts = inc
	}
	return req, req.validate(lim)
}

// unrecognizedEnum reports whether raw is the JSON string "UNRECOGNIZED": the sentinel that
// ts-proto generated code (so @a2a-js/sdk 1.3.0) writes for an enum field the caller left unset,
// e.g. ListTasks params {"status":"UNRECOGNIZED"} whenever no status filter is given. It names no
// state, so it is read as absent, the way a ProtoJSON parser that ignores unknown input treats an
// unknown enum name.
func unrecognizedEnum(raw json.RawMessage) bool {
	return string(raw) == `"UNRECOGNIZED"`
}

// maxPageTokenBytes bounds a page token given in a query: every token this server issues is far
// shorter.
const maxPageTokenBytes = 1024

// queryTooLong checks query parameters, given as name, value pairs, against their bounds: a page
// token maxPageTokenBytes, anything else lim.MaxIDBytes. It names the first one over.
func queryTooLong(lim Limits, pairs ...string) *Error {
	for i := 0; i+1 < len(pairs); i += 2 {
		name, v := pairs[i], pairs[i+1]
		bound := lim.MaxIDBytes
		if name == "pageToken" {
			bound = maxPageTokenBytes
		}
		if len(v) > bound {
			return Invalid(name, "query parameter longer than %d bytes", bound)
		}
	}
	return nil
}

func (req *ListTasksRequest) validate(lim Limits) *Error {
	if req.PageSize != nil && (*req.PageSize < 1 || *req.PageSize > lim.MaxPageSize) {
		return Invalid("pageSize", "must be between 1 and %d", lim.MaxPageSize)
	}
	if req.HistoryLength != nil && *req.HistoryLength < 0 {
		return Invalid("historyLength", "must not be negative")
	}
	return nil
}

// ListTasksFromQuery decodes ListTasks from REST query parameters (camelCase or snake_case
// names). lastUpdatedAfter is accepted as an alias of statusTimestampAfter (a2a-go clients
// send it).
func ListTasksFromQuery(q url.Values, lim Limits) (*ListTasksRequest, *Error) {
	lim = lim.WithDefaults()
	get := func(name string) string {
		if v := q.Get(name); v != "" {
			return v
		}
		return q.Get(snake(name))
	}
	req := &ListTasksRequest{Tenant: get("tenant"), ContextID: get("contextId"), PageToken: get("pageToken")}
	if err := queryTooLong(lim, "tenant", req.Tenant, "contextId", req.ContextID, "pageToken", req.PageToken); err != nil {
		return nil, err
	}
	if s := get("status"); s != "" && s != "UNRECOGNIZED" { // see unrecognizedEnum
		st, ok := ParseTaskState(s)
		if !ok {
			return nil, Invalid("status", "unknown task state %q", s)
		}
		req.Status = st
	}
	var err *Error
	if req.PageSize, err = queryInt(get("pageSize"), "pageSize"); err != nil {
		return nil, err
	}
	if req.HistoryLength, err = queryInt(get("historyLength"), "historyLength"); err != nil {
		return nil, err
	}
	ts := get("statusTimestampAfter")
	if ts == "" {
		ts = get("lastUpdatedAfter")
	}
	if ts != "" {
		t, perr := ParseTime(ts)
		if perr != nil {
			return nil, Invalid("statusTimestampAfter", "must be an RFC 3339 timestamp")
		}
		req.StatusTimestampAfter = t
	}
	if v := get("includeArtifacts"); v != "" {
		// As gRPC transcoders read a query boolean: true/false, 1/0, t/f, in any case.
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, Invalid("includeArtifacts", "must be true or false")
		}
		req.IncludeArtifacts = b
	}
	return req, req.validate(lim)
}

// HistoryLengthFromQuery decodes an optional historyLength query parameter.
func HistoryLengthFromQuery(q url.Values) (*int, *Error) {
	v := q.Get("historyLength")
	if v == "" {
		v = q.Get("history_length")
	}
	n, err := queryInt(v, "historyLength")
	if err != nil {
		return nil, err
	}
	if n != nil && *n < 0 {
		return nil, Invalid("historyLength", "must not be negative")
	}
	return n, nil
}

func queryInt(v, name string) (*int, *Error) {
	if v == "" {
		return nil, nil
	}
	n, ok := parseInt32(v)
	if !ok {
		return nil, Invalid(name, "must be a 32-bit integer")
	}
	return &n, nil
}

// DecodeCancelTaskRequest decodes CancelTask params (REST: the body, with id from the path).
func DecodeCancelTaskRequest(raw json.RawMessage, lim Limits) (*CancelTaskRequest, *Error) {
	lim = lim.WithDefaults()
	o, err := parseObject(raw, "")
	if err != nil {
		return nil, err
	}
	req := &CancelTaskRequest{}
	if req.Tenant, err = o.str("tenant", lim.MaxIDBytes); err != nil {
		return nil, err
	}
	if req.ID, err = o.str("id", lim.MaxIDBytes); err != nil {
		return nil, err
	}
	if req.Metadata, err = o.structValue("metadata", lim); err != nil {
		return nil, err
	}
	return req, nil
}

// DecodeSubscribeToTaskRequest decodes SubscribeToTask params.
func DecodeSubscribeToTaskRequest(raw json.RawMessage, lim Limits) (*SubscribeToTaskRequest, *Error) {
	lim = lim.WithDefaults()
	o, err := parseObject(raw, "")
	if err != nil {
		return nil, err
	}
	req := &SubscribeToTaskRequest{}
	if req.Tenant, err = o.str("tenant", lim.MaxIDBytes); err != nil {
		return nil, err
	}
	if req.ID, err = o.required("id", lim.MaxIDBytes); err != nil {
		return nil, err
	}
	return req, nil
}

// DecodeTenantRequest decodes params that carry only a tenant.
func DecodeTenantRequest(raw json.RawMessage, lim Limits) (*TenantRequest, *Error) {
	lim = lim.WithDefaults()
	o, err := parseObject(raw, "")
	if err != nil {
		return nil, err
	}
	t, err := o.str("tenant", lim.MaxIDBytes)
	if err != nil {
		return nil, err
	}
	return &TenantRequest{Tenant: t}, nil
}
