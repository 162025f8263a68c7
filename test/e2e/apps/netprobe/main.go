// Command netprobe is a pod that tries to reach an address, for the
// end-to-end suite's NetworkPolicy spec: from inside the pod network, as any
// tenant's pod would, it opens a TCP connection to the address it is given and
// says whether the connection was made.
//
//	GET /dial?addr=host:port  JSON {connected, error}; the attempt gives up after 3 s
package main

import (
	"encoding/json"
	"log"
	"net"
	"net/http"
	"time"
)

// dialTimeout bounds one attempt: a port a NetworkPolicy closes drops or
// rejects the connection, and a drop is only seen as a timeout.
const dialTimeout = 3 * time.Second

// Dial is the answer to /dial.
type Dial struct {
	Connected bool   `json:"connected"`
	Error     string `json:"error,omitempty"`
}

func dial(w http.ResponseWriter, r *http.Request) {
	var d Dial
	conn, err := net.DialTimeout("tcp", r.URL.Query().Get("addr"), dialTimeout)
	if err != nil {
		d.Error = err.Error()
	} else {
		d.Connected = true
		conn.Close()
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(d)
}

func main() {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /dial", dial)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	srv := &http.Server{Addr: ":8080", Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
