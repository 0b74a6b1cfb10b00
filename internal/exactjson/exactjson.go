// Package exactjson decodes JSON the way encoding/json's Unmarshal does, except that a number
// decoded into an interface value becomes a json.Number holding the number as written, not a
// float64. Metadata and data read back from the store, or from an executor's output, keep
// integers past 2^53 and decimals such as 1.10 exactly as they were given.
package exactjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// Unmarshal decodes the one JSON value in data into v, as json.Unmarshal does, with numbers in
// interface values kept as json.Number. Anything after the value but white space is an error.
func Unmarshal(data []byte, v any) error { return decode(data, v, false) }

// UnmarshalStrict is Unmarshal that also refuses an object key matching no field of v (as
// json.Decoder.DisallowUnknownFields): for files and outputs whose every key must mean something.
func UnmarshalStrict(data []byte, v any) error { return decode(data, v, true) }

func decode(data []byte, v any, strict bool) error {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	if strict {
		d.DisallowUnknownFields()
	}
	if err := d.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return io.ErrUnexpectedEOF
		}
		return err
	}
	// Token, not More: More reports false before a stray '}' or ']' as before the end.
	if _, err := d.Token(); err != io.EOF {
		return errors.New("exactjson: invalid character after top-level value")
	}
	return nil
}

// ValidUnicode reports whether body, JSON text, holds only valid UTF-8 and no lone surrogate
// escape (a \uD800–\uDFFF not part of a pair). encoding/json reads each such byte or escape as
// U+FFFD, so two different strings ("caf\xe9", "caf\xe8"; "\ud800", "\udbff") would decode as
// one: a decoder of ids refuses them instead, as ProtoJSON does.
func ValidUnicode(body []byte) bool {
	if !utf8.Valid(body) {
		return false
	}
	esc := func(i int) (rune, bool) {
		if i+6 > len(body) || body[i] != '\\' || body[i+1] != 'u' {
			return 0, false
		}
		n, err := strconv.ParseUint(string(body[i+2:i+6]), 16, 16)
		return rune(n), err == nil
	}
	for i := 0; i < len(body); i++ {
		if body[i] != '\\' {
			continue
		}
		r, ok := esc(i)
		switch {
		case !ok:
			i++ // another escape: skip the escaped character (an escaped backslash among them)
		case utf16.IsSurrogate(r):
			r2, ok2 := esc(i + 6)
			if r >= 0xDC00 || !ok2 || utf16.DecodeRune(r, r2) == utf8.RuneError {
				return false
			}
			i += 11
		default:
			i += 5
		}
	}
	return true
}
