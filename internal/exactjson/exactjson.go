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
