package a2awire

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/channels-dev/channels/internal/exactjson"
)

// object is a decoded JSON object whose members are looked up by their ProtoJSON
// (lowerCamelCase) name or their proto (snake_case) name.
type object struct {
	m    map[string]json.RawMessage
	path string
}

func isNull(raw json.RawMessage) bool {
	return len(raw) == 4 && string(raw) == "null"
}

// parseObject decodes raw as a JSON object. An empty raw or JSON null is an empty object.
func parseObject(raw json.RawMessage, path string) (object, *Error) {
	raw = bytes.TrimSpace(raw)
	o := object{path: path}
	if len(raw) == 0 || isNull(raw) {
		return o, nil
	}
	if raw[0] != '{' {
		if !json.Valid(raw) {
			return o, &Error{Kind: ErrParse, Message: "malformed JSON"}
		}
		return o, Invalid(path, "must be a JSON object")
	}
	if err := json.Unmarshal(raw, &o.m); err != nil {
		return o, &Error{Kind: ErrParse, Message: "malformed JSON: " + err.Error()}
	}
	return o, nil
}

// snake turns a lowerCamelCase name into its snake_case proto name.
func snake(name string) string {
	var b strings.Builder
	for _, r := range name {
		if r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
			b.WriteRune(r + ('a' - 'A'))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func (o object) field(name string) string {
	if o.path == "" {
		return name
	}
	return o.path + "." + name
}

// get returns the member's raw value; a JSON null counts as absent.
func (o object) get(name string) (json.RawMessage, bool) {
	if v, ok := o.m[name]; ok && !isNull(v) {
		return v, true
	}
	if s := snake(name); s != name {
		if v, ok := o.m[s]; ok && !isNull(v) {
			return v, true
		}
	}
	return nil, false
}

// getRaw returns a member's raw value including null (for google.protobuf.Value members).
func (o object) getRaw(name string) (json.RawMessage, bool) {
	if v, ok := o.m[name]; ok {
		return v, true
	}
	v, ok := o.m[snake(name)]
	return v, ok
}

func (o object) str(name string, maxLen int) (string, *Error) {
	raw, ok := o.get(name)
	if !ok {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", Invalid(o.field(name), "must be a string")
	}
	if !exactjson.ValidUnicode(raw) {
		return "", Invalid(o.field(name), "must be valid Unicode (no bytes that are not UTF-8, no lone surrogate escape)")
	}
	if maxLen > 0 && len(s) > maxLen {
		return "", Invalid(o.field(name), "longer than %d bytes", maxLen)
	}
	return s, nil
}

func (o object) required(name string, maxLen int) (string, *Error) {
	s, err := o.str(name, maxLen)
	if err != nil {
		return "", err
	}
	if s == "" {
		return "", Invalid(o.field(name), "is required")
	}
	return s, nil
}

func (o object) boolean(name string) (bool, bool, *Error) {
	raw, ok := o.get(name)
	if !ok {
		return false, false, nil
	}
	switch string(raw) {
	case "true":
		return true, true, nil
	case "false":
		return false, true, nil
	}
	return false, false, Invalid(o.field(name), "must be a boolean")
}

// int32 decodes an int32 member given as a number or a quoted number.
func (o object) int32(name string) (*int, *Error) {
	raw, ok := o.get(name)
	if !ok {
		return nil, nil
	}
	s := string(raw)
	if len(s) >= 2 && s[0] == '"' {
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, Invalid(o.field(name), "must be an integer")
		}
	}
	n, ok := parseInt32(s)
	if !ok {
		return nil, Invalid(o.field(name), "must be a 32-bit integer")
	}
	return &n, nil
}

func parseInt32(s string) (int, bool) {
	s = strings.TrimSpace(s)
	if n, err := strconv.ParseInt(s, 10, 32); err == nil {
		return int(n), true
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f != math.Trunc(f) || f < math.MinInt32 || f > math.MaxInt32 {
		return 0, false
	}
	return int(f), true
}

func (o object) strings(name string, maxItems, maxLen int) ([]string, *Error) {
	raw, ok := o.get(name)
	if !ok {
		return nil, nil
	}
	var out []string
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, Invalid(o.field(name), "must be an array of strings")
	}
	if !exactjson.ValidUnicode(raw) {
		return nil, Invalid(o.field(name), "must be valid Unicode (no bytes that are not UTF-8, no lone surrogate escape)")
	}
	if len(out) > maxItems {
		return nil, Invalid(o.field(name), "more than %d items", maxItems)
	}
	for _, s := range out {
		if len(s) > maxLen {
			return nil, Invalid(o.field(name), "an item is longer than %d bytes", maxLen)
		}
	}
	return out, nil
}

func (o object) array(name string) ([]json.RawMessage, bool, *Error) {
	raw, ok := o.get(name)
	if !ok {
		return nil, false, nil
	}
	var out []json.RawMessage
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, true, Invalid(o.field(name), "must be an array")
	}
	return out, true, nil
}

func (o object) child(name string) (object, bool, *Error) {
	raw, ok := o.get(name)
	if !ok {
		return object{path: o.field(name)}, false, nil
	}
	c, err := parseObject(raw, o.field(name))
	return c, true, err
}

// structValue decodes a google.protobuf.Struct member (metadata): a JSON object, bounded in size
// and depth, with numbers kept exact.
func (o object) structValue(name string, lim Limits) (map[string]any, *Error) {
	raw, ok := o.get(name)
	if !ok {
		return nil, nil
	}
	return decodeStruct(raw, o.field(name), lim)
}

func decodeStruct(raw json.RawMessage, field string, lim Limits) (map[string]any, *Error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return nil, Invalid(field, "must be a JSON object")
	}
	if len(raw) > lim.MaxMetadataBytes {
		return nil, Invalid(field, "larger than %d bytes", lim.MaxMetadataBytes)
	}
	if JSONDepth(raw) > lim.MaxDataDepth {
		return nil, Invalid(field, "nested deeper than %d levels", lim.MaxDataDepth)
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		return nil, Invalid(field, "must be a JSON object")
	}
	return m, nil
}

func (o object) timestamp(name string) (time.Time, *Error) {
	s, err := o.str(name, 64)
	if err != nil || s == "" {
		return time.Time{}, err
	}
	t, perr := ParseTime(s)
	if perr != nil {
		return time.Time{}, Invalid(o.field(name), "must be an RFC 3339 timestamp")
	}
	return t, nil
}

// ParseTime parses an RFC 3339 timestamp (any offset, any sub-second precision) into UTC.
func ParseTime(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, err
	}
	// time.Parse takes offsets RFC 3339 does not (+24:00, +23:60).
	if n := len(s); n > 6 && (s[n-6] == '+' || s[n-6] == '-') && (s[n-5:n-3] > "23" || s[n-2:] > "59") {
		return time.Time{}, fmt.Errorf("%q: offset out of range", s)
	}
	return t.UTC(), nil
}

// decodeBytes decodes a proto bytes value: standard or URL-safe base64, padded or not.
func decodeBytes(s string) ([]byte, bool) {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			return b, true
		}
	}
	return nil, false
}

// enumValue decodes an enum given by name or number against names (indexed by number).
func enumValue[T ~string](raw json.RawMessage, names []T) (T, bool) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		for _, n := range names {
			if string(n) == s {
				return n, true
			}
		}
		return "", false
	}
	n, ok := parseInt32(string(raw))
	if !ok || n < 0 || n >= len(names) {
		return "", false
	}
	return names[n], true
}

// ParseTaskState parses a task state given by proto name or number ("" is unspecified).
func ParseTaskState(s string) (TaskState, bool) {
	if s == "" {
		return TaskStateUnspecified, true
	}
	raw, _ := json.Marshal(s)
	if n, ok := parseInt32(s); ok {
		raw = []byte(strconv.Itoa(n))
	}
	return enumValue(raw, taskStateNumbers)
}
