package taskplane

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

// digest is the SHA-256 of the event's normalized payload, marked with digestMark. It leaves out
// everything the server mints (task and context ids), the direct reply (the executor's output),
// and transport details (locator, checkpoint), so a provider's redelivery of the same event
// digests the same. The event's Metadata is payload (it becomes the task's metadata, and
// settlements read their links from it).
//
// The payload is digested in its canonical form, so that a client's retry that another encoder
// wrote (a proxy, a queue, another language's protobuf library) digests as the original: an
// empty metadata object or list is the same as an absent one, and data parts and metadata are
// compared as the JSON values they are — object keys in any order, numbers by their exact decimal
// value (1, 1.0 and 1e0 are one number; two integers a double cannot tell apart are two),
// strings however they were escaped (a data part with a lone surrogate escape, or bytes that are
// not UTF-8, as written).
func (ev *Event) digest() (string, error) {
	d, err := ev.digestOf(formulaCanonical)
	return digestMark + d, err
}

// digestMark starts every digest this release records (formulaCanonical). Claims recorded by
// older releases hold digests of an older formula: marked with digestMarkV2 (formulaV2), or bare
// hex, of formulaV2 or, earlier still, formulaLegacy.
const (
	digestMark   = "v3:"
	digestMarkV2 = "v2:"
)

// A digestFormula is one release's way of digesting an event.
type digestFormula int

const (
	// formulaLegacy does not cover the event's Metadata.
	formulaLegacy digestFormula = iota
	// formulaV2 covers the event's Metadata, and digests the payload as it was decoded.
	formulaV2
	// formulaCanonical digests the payload in its canonical form (see digest).
	formulaCanonical
)

// matchesDigest reports whether stored, a claim's digest, is ev's, whose digest is dg. A digest
// of this release's formula must be equal. One an older release recorded is matched under its
// formula, so redeliveries of an event those releases accepted still deduplicate (a retry that
// only adds Metadata to an event a formulaLegacy claim holds cannot be told from a redelivery).
func (ev *Event) matchesDigest(stored, dg string) bool {
	switch {
	case stored == dg:
		return true
	case strings.HasPrefix(stored, digestMark):
		return false
	case strings.HasPrefix(stored, digestMarkV2):
		return ev.digestIs(formulaV2, strings.TrimPrefix(stored, digestMarkV2))
	}
	// Bare: both older formulas agree on an event without Metadata.
	return ev.digestIs(formulaV2, stored) || (len(ev.Metadata) > 0 && ev.digestIs(formulaLegacy, stored))
}

// digestIs reports whether ev's digest under formula f is hexDigest.
func (ev *Event) digestIs(f digestFormula, hexDigest string) bool {
	d, err := ev.digestOf(f)
	return err == nil && d == hexDigest
}

func (ev *Event) digestOf(f digestFormula) (string, error) {
	m := ev.Message
	d := struct {
		Source, Identity, ConversationKey, ContextID, TaskID, ReplyTo string
		MessageID, ClientContextID, ClientTaskID                      string
		Role                                                          Role
		Parts                                                         []Part
		Metadata                                                      map[string]any
		Extensions, ReferenceTaskIDs                                  []string
		EventMetadata                                                 map[string]any `json:",omitempty"`
	}{Source: ev.Source, Identity: ev.Identity, ConversationKey: ev.ConversationKey, ContextID: ev.ContextID,
		TaskID: ev.TaskID, ReplyTo: ev.ReplyTo, MessageID: m.ID, ClientContextID: m.ContextID, ClientTaskID: m.TaskID,
		Role: m.Role, Parts: m.Parts, Metadata: m.Metadata, Extensions: m.Extensions, ReferenceTaskIDs: m.ReferenceTaskIDs}
	if f != formulaLegacy {
		d.EventMetadata = ev.Metadata
	}
	if f == formulaCanonical {
		d.Metadata, d.EventMetadata = canonicalStruct(d.Metadata), canonicalStruct(d.EventMetadata)
		if len(d.Extensions) == 0 {
			d.Extensions = nil
		}
		if len(d.ReferenceTaskIDs) == 0 {
			d.ReferenceTaskIDs = nil
		}
		parts := make([]Part, len(d.Parts))
		for i, p := range d.Parts {
			p.Metadata = canonicalStruct(p.Metadata)
			if len(p.Data) > 0 {
				p.Data = canonicalData(p.Data)
			}
			parts[i] = p
		}
		d.Parts = parts
	}
	b, err := json.Marshal(d)
	if err != nil {
		return "", fmt.Errorf("digest: %w", err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// canonicalStruct is m with its numbers in their canonical form (canonicalNumber; encoding/json
// writes object keys sorted); nil when m is empty.
func canonicalStruct(m map[string]any) map[string]any {
	switch {
	case len(m) == 0:
		return nil
	case !hasNumbers(m):
		return m // nothing to rewrite: spare the copy
	}
	return canonicalValue(m).(map[string]any)
}

// hasNumbers reports whether v holds a json.Number or a json.RawMessage (which canonicalValue
// rewrites).
func hasNumbers(v any) bool {
	switch v := v.(type) {
	case map[string]any:
		for _, e := range v {
			if hasNumbers(e) {
				return true
			}
		}
	case []any:
		for _, e := range v {
			if hasNumbers(e) {
				return true
			}
		}
	case json.Number, json.RawMessage:
		return true
	}
	return false
}

func canonicalValue(v any) any {
	switch v := v.(type) {
	case map[string]any:
		c := make(map[string]any, len(v))
		for k, e := range v {
			c[k] = canonicalValue(e)
		}
		return c
	case []any:
		c := make([]any, len(v))
		for i, e := range v {
			c[i] = canonicalValue(e)
		}
		return c
	case json.Number:
		return canonicalNumber(string(v))
	case json.RawMessage:
		return canonicalData(v)
	}
	return v
}

// canonicalData is the JSON value raw re-encoded from its decoded form: keys sorted, numbers in
// their canonical form, strings escaped one way. A value with a lone surrogate escape or bytes
// that are not UTF-8 stays as written: decoding turns each into U+FFFD, so two different ones
// would read as one (the part is stored as written). So does anything that is not one JSON value,
// which the digest then refuses.
func canonicalData(raw json.RawMessage) json.RawMessage {
	if !utf8.Valid(raw) || hasLoneSurrogateEscape(raw) {
		return raw
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return raw
	}
	if _, err := d.Token(); err != io.EOF {
		return raw // more than one value: not JSON, refused as written
	}
	b, err := json.Marshal(canonicalValue(v))
	if err != nil || bytes.Equal(b, raw) {
		return raw
	}
	return b
}

// hasLoneSurrogateEscape reports whether raw holds a \uD800–\uDFFF escape that is not half of a
// pair (a high one followed by a low one, as encoders write characters past U+FFFF).
func hasLoneSurrogateEscape(raw []byte) bool {
	// surrogate reads the escape at raw[i:], if it is one: 1 high, 2 low, 0 neither.
	surrogate := func(i int) int {
		if i+6 > len(raw) || raw[i] != '\\' || raw[i+1] != 'u' {
			return 0
		}
		v, err := strconv.ParseUint(string(raw[i+2:i+6]), 16, 16)
		switch {
		case err != nil || v < 0xD800 || v > 0xDFFF:
			return 0
		case v < 0xDC00:
			return 1
		}
		return 2
	}
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		switch surrogate(i) {
		case 1:
			if surrogate(i+6) != 2 {
				return true
			}
			i += 11 // the pair
		case 2:
			return true
		default:
			i++ // the escaped character: an escaped backslash is not the start of an escape
		}
	}
	return false
}

// canonicalNumber is the JSON number s in one form for its exact decimal value, so 1, 1.0, 1e0
// and 10e-1 are one number and 9007199254740993 is not 9007199254740992 (a double would make it
// so): the significant digits, without leading or trailing zeros, and an exponent ("125e-1" for
// 12.5, "0" for every zero). An exponent past 2^30 stays as written.
func canonicalNumber(s string) json.Number {
	neg := strings.HasPrefix(s, "-")
	mant, exp := strings.TrimPrefix(s, "-"), 0
	if i := strings.IndexAny(mant, "eE"); i >= 0 {
		e, err := strconv.Atoi(mant[i+1:])
		if err != nil || e > 1<<30 || e < -(1<<30) {
			return json.Number(s)
		}
		mant, exp = mant[:i], e
	}
	whole, frac, _ := strings.Cut(mant, ".")
	digits := strings.TrimLeft(whole+frac, "0")
	exp -= len(frac)
	if digits == "" {
		return "0"
	}
	trimmed := strings.TrimRight(digits, "0")
	exp += len(digits) - len(trimmed)
	out := trimmed
	if exp != 0 {
		out += "e" + strconv.Itoa(exp)
	}
	if neg {
		out = "-" + out
	}
	return json.Number(out)
}
