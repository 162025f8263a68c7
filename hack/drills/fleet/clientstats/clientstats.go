// Package clientstats is what a fleet drill client (test/e2e/apps/fleetclient)
// counts of one run's operations: the wire format its /stats answers and the
// drill reads, as package depseries is the dependency's.
package clientstats

// Stats is /stats: what one run's operations came to in this pod.
type Stats struct {
	Run  string `json:"run"`
	Mode string `json:"mode"`
	// Started operations; Succeeded and Failed ended, by their final code
	// ("" for a status the client returned as is), Unknown among the failed
	// with an unknown outcome. InFlight have no terminal state yet.
	Started   int            `json:"started"`
	Succeeded int            `json:"succeeded"`
	Failed    map[string]int `json:"failed"`
	Unknown   int            `json:"unknown"`
	InFlight  int            `json:"inFlight"`
	Refused   int            `json:"refused"`
	// Letters are the dead letters its journal stored, by code; Examples
	// the first failure's detail of each code.
	Letters  map[string]int    `json:"letters"`
	Examples map[string]string `json:"examples"`
	// MaxLateMs is how late the generator began an operation at worst.
	MaxLateMs float64 `json:"maxLateMs"`
}
