package httprules

import (
	"encoding/json"
	"net/http"
)

// Problem is the RFC 9457 rendering of a refusal, as a retry.Error renders
// itself (Error.Problem) and as the inbound guard answers a repeated request.
type Problem struct {
	Type     string `json:"type"`
	Title    string `json:"title"`
	Status   int    `json:"status"`
	Detail   string `json:"detail,omitempty"`
	Code     string `json:"code"`
	Instance string `json:"instance,omitempty"`
}

// ProblemType is the base of every problem type URI.
const ProblemType = "https://retryguard.io/problems/"

// WriteProblem writes p as application/problem+json.
func WriteProblem(w http.ResponseWriter, p Problem) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}
