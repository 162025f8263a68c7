// Package clientstats is what a fleet drill client (test/e2e/apps/fleetclient)
// counts of one run's operations: the wire format its /stats answers and the
// drill reads, as package depseries is the dependency's.
package clientstats

import "maps"

// Stats is /stats: what one run's operations came to in this pod.
type Stats struct {
	Run  string `json:"run"`
	Mode string `json:"mode"`
	// Client is how the pod reaches the dependency in a Retryguard run:
	// one of Clients.
	Client string `json:"client"`
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
	// UnknownLetters are the letters of operations in state
	// UNKNOWN_OUTCOME, whatever their code (a budget's refusal after an
	// attempt that may have been applied is one).
	UnknownLetters int `json:"unknownLetters"`
	// Unconfirmed are letters the sidecar's answers said it kept that its
	// journal does not hold (the journal's count grew by fewer): a sidecar
	// pod counts its letters from the answers, by code, and checks the
	// total against the journal.
	Unconfirmed int `json:"unconfirmed,omitempty"`
	// JournalBefore is the letters the sidecar's journal held when the
	// run began (a sidecar pod's Retryguard run).
	JournalBefore int `json:"journalBefore,omitempty"`
	// MaxLateMs is how late the generator began an operation at worst.
	MaxLateMs float64 `json:"maxLateMs"`
}

// Clone is a copy of s that shares no map with it.
func (s *Stats) Clone() Stats {
	c := *s
	c.Failed, c.Letters, c.Examples = maps.Clone(s.Failed), maps.Clone(s.Letters), maps.Clone(s.Examples)
	return c
}

// The ways a fleet pod reaches the dependency in a Retryguard run; in a
// naive run each pod speaks the same protocol without Retryguard (a
// sidecar pod sends plain HTTP to the dependency, past its sidecar).
const (
	// HTTP is a Go client on retry.RoundTripper.
	HTTP = "http"
	// GRPC is a Go client on runtime/grpc's Interceptor.
	GRPC = "grpc"
	// Sidecar is a client with no Retryguard code, sending plain HTTP to
	// the injected retryguard-proxy on localhost, as a busybox or Python
	// client would.
	Sidecar = "sidecar"
)

// Clients are the ways, in the order the report lists them.
var Clients = []string{HTTP, GRPC, Sidecar}
