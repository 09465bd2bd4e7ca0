package protocol

import "strconv"

// NextID is POST /v1/singleton/next-id's reply.
type NextID struct {
	ServedBy ServedBy `json:"served_by"`
	// ID is positive; no id is ever handed out twice, and ids increase in
	// real-time order.
	ID int64 `json:"id"`
	// Singleton is the instance that generated it.
	Singleton SingletonInstance `json:"singleton"`
}

// SingletonInstance names one instance of a singleton: its member and
// which start of the singleton on that member it was.
type SingletonInstance struct {
	Node        string `json:"node"`
	Incarnation string `json:"incarnation"`
	// Instance counts singleton starts on this member, from 1.
	Instance int64 `json:"instance"`
}

// String is node@incarnation#instance, the form histories and status
// samples use.
func (s SingletonInstance) String() string {
	if s.Node == "" && s.Incarnation == "" && s.Instance == 0 {
		return ""
	}
	return s.Node + "@" + s.Incarnation + "#" + strconv.FormatInt(s.Instance, 10)
}
