package workloads

import "encoding/json"

// mustJSON encodes a payload of the protocol's entity types, which always
// encode.
func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic("workloads: encode " + err.Error())
	}
	return b
}
