package store

import (
	"encoding/json"
	"errors"
)

// errHeadersNotObject reports a headers column that is not a JSON object.
var errHeadersNotObject = errors.New("headers are not a JSON object")

// decodeHeaders reads a headers column's JSON text: nil for SQL NULL ("")
// or JSON null. A column that is an object whose values are not all strings
// (written by hand) is read as far as it can be: string values as they are,
// others as their JSON text. Anything but an object is errHeadersNotObject.
func decodeHeaders(text string) (map[string]string, error) {
	if text == "" || text == "null" {
		return nil, nil
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(text), &raw); err != nil {
		return nil, errHeadersNotObject
	}
	out := make(map[string]string, len(raw))
	for k, v := range raw {
		var s string
		if json.Unmarshal(v, &s) == nil {
			out[k] = s
		} else {
			out[k] = string(v)
		}
	}
	return out, nil
}
