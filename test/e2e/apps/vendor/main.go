// Command vendor is a fake telephony API for the end-to-end suite. It answers
// POST /v1/messages with the next scripted status (then, once the script is
// empty, the script's fallback status: 201 unless set) and remembers every
// attempt: its Idempotency-Key, its status, when it arrived on this node's
// clock, and whether its key was seen before (a retry of an operation), so
// that the suite can count what reached the vendor and when.
//
//	PUT /script?then=S body: JSON list of statuses; also clears the attempt log
//	GET /attempts      JSON list of {key, status, at, retry}
//	GET /v1/cut        200 with a chunked body cut after 24,576 of its 65,536 bytes
//	GET /v1/whole      200 with the whole 65,536 bytes
//
// With a certificate mounted at /tls (tls.crt, tls.key) it serves the same on
// :8443 over TLS too.
package main

import (
	"encoding/json"
	"log"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Attempt is one request the vendor received.
type Attempt struct {
	Key    string `json:"key"`
	Status int    `json:"status"`
	// At is when the request arrived, on the vendor's clock.
	At time.Time `json:"at"`
	// Retry says an earlier attempt since the script was set carried the
	// same Idempotency-Key.
	Retry bool `json:"retry"`
}

type vendor struct {
	mu       sync.Mutex
	script   []int
	then     int // the status once the script is empty
	attempts []Attempt
	keys     map[string]bool
}

func (v *vendor) messages(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	key := r.Header.Get("Idempotency-Key")
	v.mu.Lock()
	code := v.then
	if len(v.script) > 0 {
		code, v.script = v.script[0], v.script[1:]
	}
	retry := key != "" && v.keys[key]
	if key != "" {
		v.keys[key] = true
	}
	v.attempts = append(v.attempts, Attempt{Key: key, Status: code, At: now, Retry: retry})
	v.mu.Unlock()
	w.WriteHeader(code)
}

func (v *vendor) setScript(w http.ResponseWriter, r *http.Request) {
	var script []int
	if err := json.NewDecoder(r.Body).Decode(&script); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	then := http.StatusCreated
	if s := r.URL.Query().Get("then"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 100 || n > 599 {
			http.Error(w, "then: want an HTTP status, got "+strconv.Quote(s), http.StatusBadRequest)
			return
		}
		then = n
	}
	v.mu.Lock()
	v.script, v.then, v.attempts, v.keys = script, then, nil, map[string]bool{}
	v.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (v *vendor) list(w http.ResponseWriter, _ *http.Request) {
	v.mu.Lock()
	defer v.mu.Unlock()
	_ = json.NewEncoder(w).Encode(append([]Attempt{}, v.attempts...))
}

// cut answers 200 and closes the connection part way through the body: the
// client must see a broken body, never a short one that ends cleanly.
func cut(w http.ResponseWriter, _ *http.Request) {
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte(strings.Repeat("x", 24576)))
	_ = http.NewResponseController(w).Flush()
	if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
		_ = conn.Close()
	}
}

func main() {
	v := &vendor{then: http.StatusCreated, keys: map[string]bool{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/messages", v.messages)
	mux.HandleFunc("PUT /script", v.setScript)
	mux.HandleFunc("GET /attempts", v.list)
	mux.HandleFunc("GET /v1/cut", cut)
	mux.HandleFunc("GET /v1/whole", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(strings.Repeat("x", 65536))) })
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	if _, err := os.Stat("/tls/tls.crt"); err == nil {
		go func() {
			tlsSrv := &http.Server{Addr: ":8443", Handler: mux, ReadHeaderTimeout: 5 * time.Second}
			log.Fatal(tlsSrv.ListenAndServeTLS("/tls/tls.crt", "/tls/tls.key"))
		}()
	}
	srv := &http.Server{Addr: ":8080", Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
