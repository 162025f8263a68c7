// Command vendor is a fake telephony API for the end-to-end suite. It answers
// POST /v1/messages with the next scripted status (201 once the script is
// empty) and remembers every attempt's Idempotency-Key, so that the suite
// can count what reached the vendor.
//
//	PUT /script   body: JSON list of statuses; also clears the attempt log
//	GET /attempts JSON list of {key, status}
package main

import (
	"encoding/json"
	"log"
	"net/http"
	"sync"
	"time"
)

// Attempt is one request the vendor received.
type Attempt struct {
	Key    string `json:"key"`
	Status int    `json:"status"`
}

type vendor struct {
	mu       sync.Mutex
	script   []int
	attempts []Attempt
}

func (v *vendor) messages(w http.ResponseWriter, r *http.Request) {
	v.mu.Lock()
	code := http.StatusCreated
	if len(v.script) > 0 {
		code, v.script = v.script[0], v.script[1:]
	}
	v.attempts = append(v.attempts, Attempt{Key: r.Header.Get("Idempotency-Key"), Status: code})
	v.mu.Unlock()
	w.WriteHeader(code)
}

func (v *vendor) setScript(w http.ResponseWriter, r *http.Request) {
	var script []int
	if err := json.NewDecoder(r.Body).Decode(&script); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	v.mu.Lock()
	v.script, v.attempts = script, nil
	v.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (v *vendor) list(w http.ResponseWriter, _ *http.Request) {
	v.mu.Lock()
	defer v.mu.Unlock()
	_ = json.NewEncoder(w).Encode(append([]Attempt{}, v.attempts...))
}

func main() {
	v := &vendor{}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/messages", v.messages)
	mux.HandleFunc("PUT /script", v.setScript)
	mux.HandleFunc("GET /attempts", v.list)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	srv := &http.Server{Addr: ":8080", Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
