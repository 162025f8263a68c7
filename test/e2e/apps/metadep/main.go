// Command metadep is the fleet drill's dependency: a server that can fail
// metastably. Its workers complete $WORKERS requests per $SERVICE (400/s by
// default) from a bounded queue; latency grows with the queue, and a worker
// drops a request that waited past $DROP_AFTER. Between the clients'
// per-attempt timeout and that age a worker does the whole work for a
// client that has gone: once retries fill the queue, every answer is too
// late, and the overload outlives whatever began it.
//
// It counts, per second of its own clock, every request it receives, first
// or retried (an Idempotency-Key it saw before), and every one it applied,
// duplicates (a key applied before) among them.
//
// It serves one model over two APIs, so that HTTP and gRPC clients land in
// one series: HTTP on $ADDR (:8080 by default) and gRPC on $GRPC_ADDR
// (:8081), the service test/e2e/internal/depgrpc describes, whose Work
// answers as POST /v1/work does (the key in the metadata idempotency-key;
// OK for 201, UNAVAILABLE for 503, RESOURCE_EXHAUSTED with
// grpc-retry-pushback-ms for 429 and its Retry-After).
//
//	POST /v1/work                      the API: 201 once applied
//	POST /reset                        begins a new series
//	POST /trigger?kind=K&for=D         switches trigger K (outage, throttle, slow) on for D; JSON window
//	GET  /series                       JSON depseries.Series
//	GET  /state                        JSON {queue, trigger}
//	GET  /healthz                      200
//	gRPC /retryguard.drill.v1.Dependency/Work   the API: OK once applied
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"google.golang.org/grpc"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	cfg, err := configFromEnv(defaults, os.Getenv)
	if err != nil {
		log.Fatal(err)
	}
	d := startDep(ctx, cfg)
	srv := &http.Server{Addr: cmp.Or(os.Getenv("ADDR"), ":8080"), Handler: d.handler(), ReadHeaderTimeout: 5 * time.Second}
	lis, err := net.Listen("tcp", cmp.Or(os.Getenv("GRPC_ADDR"), ":8081"))
	if err != nil {
		log.Fatal(err)
	}
	gs := d.grpcServer()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		// GracefulStop waits for every call; the workers have stopped with
		// ctx, so a queued call ends only with its client: Stop cuts the
		// rest when the HTTP server's grace is over.
		stopped := make(chan struct{})
		go func() { gs.GracefulStop(); close(stopped) }()
		_ = srv.Shutdown(shutdown)
		select {
		case <-stopped:
		case <-shutdown.Done():
			gs.Stop()
		}
	}()
	slog.Info("metadep listening", "capacity", cfg.capacity(), "queue", cfg.QueueLimit, "dropAfter", cfg.DropAfter, "grpc", lis.Addr().String())
	errs := make(chan error, 2)
	go func() {
		if err := gs.Serve(lis); !errors.Is(err, grpc.ErrServerStopped) {
			errs <- err // nil once stopped while serving
			return
		}
		errs <- nil
	}()
	go func() {
		if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
			errs <- err
			return
		}
		errs <- nil
	}()
	for range 2 {
		if err := <-errs; err != nil {
			log.Fatal(err)
		}
	}
}

// configFromEnv overrides base with $WORKERS, $SERVICE, $QUEUE, $DROP_AFTER,
// $SLOW_BY and $RETRY_AFTER where set.
func configFromEnv(base config, env func(string) string) (config, error) {
	c := base
	for name, dst := range map[string]*int{"WORKERS": &c.Workers, "QUEUE": &c.QueueLimit, "RETRY_AFTER": &c.RetryAfter} {
		if s := env(name); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil {
				return c, fmt.Errorf("$%s=%q: want an integer", name, s)
			}
			*dst = n
		}
	}
	for name, dst := range map[string]*time.Duration{"SERVICE": &c.Service, "DROP_AFTER": &c.DropAfter, "SLOW_BY": &c.SlowBy} {
		if s := env(name); s != "" {
			d, err := time.ParseDuration(s)
			if err != nil {
				return c, fmt.Errorf("$%s=%q: want a duration such as 100ms", name, s)
			}
			*dst = d
		}
	}
	return c, c.validate()
}

// start runs the workers until ctx ends and returns the HTTP handler.
func start(ctx context.Context, cfg config) http.Handler { return startDep(ctx, cfg).handler() }

// startDep runs a new dependency's workers until ctx ends.
func startDep(ctx context.Context, cfg config) *dep {
	d := newDep(cfg, time.Now())
	for range cfg.Workers {
		go d.work(ctx)
	}
	context.AfterFunc(ctx, func() {
		d.mu.Lock()
		d.nonEmpty.Broadcast()
		d.mu.Unlock()
	})
	return d
}

// handler is the HTTP API, the drill's controls among it.
func (d *dep) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/work", d.serve)
	mux.HandleFunc("POST /reset", func(w http.ResponseWriter, _ *http.Request) {
		d.reset(time.Now())
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /trigger", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		length, err := time.ParseDuration(q.Get("for"))
		if err != nil {
			http.Error(w, fmt.Sprintf("for=%q: want a duration such as 8s", q.Get("for")), http.StatusBadRequest)
			return
		}
		win, err := d.setTrigger(q.Get("kind"), time.Now(), length)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		_ = json.NewEncoder(w).Encode(win)
	})
	mux.HandleFunc("GET /series", func(w http.ResponseWriter, _ *http.Request) { _ = json.NewEncoder(w).Encode(d.series()) })
	mux.HandleFunc("GET /state", func(w http.ResponseWriter, _ *http.Request) {
		d.mu.Lock()
		out := map[string]any{"queue": len(d.queue), "trigger": d.active(time.Now())}
		d.mu.Unlock()
		_ = json.NewEncoder(w).Encode(out)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	return mux
}
