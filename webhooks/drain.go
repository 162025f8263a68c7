package webhooks

import (
	"net/http"
	"sync/atomic"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// DefaultShutdownDrain is how long a terminating manager keeps serving
// admission after SIGTERM before it stops (docs/webhooks.md, rollouts and
// failover): longer than the endpoints controller and kube-proxy take to
// send new connections to the other replicas, and short enough that the
// shutdown that follows fits the pod's terminationGracePeriodSeconds (10).
const DefaultShutdownDrain = 5 * time.Second

// Draining is a manager's shutdown state. Its zero value serves; it is
// safe for concurrent use.
type Draining struct{ on atomic.Bool }

// Start marks the manager as terminating.
func (d *Draining) Start() { d.on.Store(true) }

// On reports whether the manager is terminating.
func (d *Draining) On() bool { return d.on.Load() }

// Drain wraps srv so that, once d is on, every admission answer closes its
// connection (Connection: close). The API server reaches the webhook
// through the Service's virtual IP, and a keep-alive connection stays with
// the pod it was opened to whatever the endpoints say: without this, the
// API server goes on sending reviews down a connection to a terminating
// replica until that replica's shutdown closes it, and a review written as
// the server closes the idle connection fails with EOF (a POST is not
// re-sent), failing closed. An answer that closes the connection is one the
// client reads in full and then knows not to reuse, so the next review
// opens a connection that goes to a replica that stays. The wrapper is as
// safe for concurrent use as srv.
func Drain(srv webhook.Server, d *Draining) webhook.Server { return &drainingServer{Server: srv, d: d} }

type drainingServer struct {
	webhook.Server
	d *Draining
}

func (s *drainingServer) Register(path string, hook http.Handler) {
	s.Server.Register(path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.d.On() {
			w.Header().Set("Connection", "close")
		}
		hook.ServeHTTP(w, r)
	}))
}
