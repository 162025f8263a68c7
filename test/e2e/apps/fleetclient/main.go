// Command fleetclient is one pod of the fleet drill's client fleet: it
// drives a steady, open-loop rate of operations against the dependency,
// either with naive retries (hack/drills/fleet/naive: 3 × 3 × 3 attempts,
// fixed delays, no jitter, no budget) or with Retryguard under $POLICY, the
// connector layer of a chain the RetryPolicies declare, drawing on their
// counted RetryBudget. Every attempt of one operation carries one
// Idempotency-Key. $CLIENT says how the pod reaches the dependency
// (clientstats.Clients):
//
//	http     $DEP_URL/v1/work through retry.RoundTripper (naive: plain net/http)
//	grpc     $DEP_GRPC's Work method through runtime/grpc's Interceptor (naive: plain grpc-go)
//	sidecar  plain HTTP to the injected retryguard-proxy's route at $SIDECAR_URL, with
//	         no Retryguard code in the process, as a busybox or Python client
//	         (naive: plain net/http to $DEP_URL, past the sidecar)
//
//	POST /start?mode=naive|retryguard&rate=R&run=ID  begins R operations a second
//	POST /stop                                       stops beginning operations
//	GET  /stats                                      JSON clientstats.Stats of the run
//	GET  /policy                                     JSON policyview.View (a sidecar pod: the sidecar's)
//	GET  /healthz                                    200 once the policy is known
//
// A Go client's dead letters go to a journal ($JOURNAL); /stats counts
// those it stored. A sidecar pod's are in the sidecar's journal: it counts
// them from the answers and checks the count against the journal's.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/retryguard/retryguard/hack/drills/fleet/clientstats"
	"github.com/retryguard/retryguard/hack/drills/fleet/depseries"
	"github.com/retryguard/retryguard/hack/drills/fleet/naive"
	"github.com/retryguard/retryguard/runtime/deadletter"
	"github.com/retryguard/retryguard/runtime/retry"
	"github.com/retryguard/retryguard/runtime/watch"
	"github.com/retryguard/retryguard/runtime/watch/informer"
	"github.com/retryguard/retryguard/test/e2e/internal/policyview"
)

// The modes a run drives its operations in.
const (
	modeNaive      = "naive"
	modeRetryguard = "retryguard"
)

// naiveAttemptTimeout bounds each naive attempt, as the policy's
// perAttemptTimeout bounds Retryguard's (testdata/fleet-drill.yaml): the
// wait past which the dependency counts itself over capacity.
const naiveAttemptTimeout = depseries.MaxHealthyWait

// maxInFlight bounds the operations one pod has open, so that a storm
// cannot take the pod's memory; an operation refused by it is counted.
const maxInFlight = 4000

type client struct {
	pod    string
	kind   string // how the pod reaches the dependency: one of clientstats.Clients
	depURL string
	policy string
	rg     *http.Client
	plain  *http.Client
	grpc   *grpcDep // a grpc pod's
	side   *sidecar // a sidecar pod's
	// closers end what the Go clients hold open, once the server is shut down.
	closers []func() error

	mu sync.Mutex
	// stats is the current run's; runs holds every run's by name, so that
	// an operation of an earlier run still counts in its own.
	stats *clientstats.Stats
	runs  map[string]*clientstats.Stats
	stop  context.CancelFunc
}

// countingSink stores letters in the journal and counts those stored.
type countingSink struct {
	j *deadletter.Journal
	c *client
}

func (s countingSink) Write(ctx context.Context, l retry.DeadLetter) error {
	if err := s.j.Write(ctx, l); err != nil {
		return err
	}
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	// The key names the operation's run (key).
	for id, st := range s.c.runs {
		if strings.HasPrefix(l.Key, s.c.key(id+"-")) {
			st.Letters[string(l.Code)]++
			if l.State == retry.UnknownOutcome {
				st.UnknownLetters++
			}
		}
	}
	return nil
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	policy := os.Getenv("POLICY")
	if policy == "" {
		return errors.New("$POLICY: want the connector layer's RetryPolicy")
	}
	c := &client{pod: os.Getenv("POD_NAME"), kind: cmp.Or(os.Getenv("CLIENT"), clientstats.HTTP),
		depURL: strings.TrimSuffix(os.Getenv("DEP_URL"), "/"), policy: policy}
	if !slices.Contains(clientstats.Clients, c.kind) {
		return fmt.Errorf("$CLIENT=%q: want one of %v", c.kind, clientstats.Clients)
	}
	c.stats, c.runs = newStats("", "", c.kind), map[string]*clientstats.Stats{}
	c.plain = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 512}}
	mux := http.NewServeMux()
	if c.kind == clientstats.Sidecar {
		// No Retryguard code in this process: the sidecar enforces the policy.
		c.side = newSidecar(os.Getenv("SIDECAR_URL"), policy)
		mux.HandleFunc("GET /healthz", c.side.healthz)
		mux.HandleFunc("GET /policy", c.side.policyView)
	} else if err := c.retryguardClients(ctx, mux); err != nil {
		return err
	}
	err := c.serve(ctx, mux)
	for _, closeFn := range c.closers {
		err = errors.Join(err, closeFn())
	}
	return err
}

// retryguardClients starts a Go client's policy watch, journal and
// executor, and serves its /healthz and /policy.
func (c *client) retryguardClients(ctx context.Context, mux *http.ServeMux) error {
	policy := c.policy
	var src interface {
		retry.Source
		Start(context.Context) error
	}
	if dir := os.Getenv("POLICY_DIR"); dir != "" {
		src = watch.NewFiles(dir)
	} else {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return err
		}
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return err
		}
		src = informer.New(cs, os.Getenv("POD_NAMESPACE"))
	}
	if err := src.Start(ctx); err != nil {
		return err
	}
	journal, err := deadletter.Open(os.Getenv("JOURNAL"))
	if err != nil {
		return fmt.Errorf("$JOURNAL: %w", err)
	}
	c.closers = append(c.closers, journal.Close) // after the server: letters of operations still ending are kept
	ex := retry.New(src, retry.WithDeadLetters(countingSink{j: journal, c: c}))
	c.rg = &http.Client{Transport: &retry.RoundTripper{Executor: ex, Policy: policy, Pools: &retry.Pools{}}}
	if c.kind == clientstats.GRPC {
		if c.grpc, err = newGRPCDep(os.Getenv("DEP_GRPC"), ex, policy); err != nil {
			return fmt.Errorf("$DEP_GRPC: %w", err)
		}
		c.closers = append(c.closers, c.grpc.close)
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		if _, ok := src.Policy(policy); !ok {
			http.Error(w, "policy "+policy+" not published yet", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	mux.HandleFunc("GET /policy", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(policyview.Of(src, ex, policy))
	})
	return nil
}

// serve answers the drill until ctx ends.
func (c *client) serve(ctx context.Context, mux *http.ServeMux) error {
	mux.HandleFunc("POST /start", c.start)
	mux.HandleFunc("POST /stop", func(w http.ResponseWriter, _ *http.Request) {
		c.mu.Lock()
		if c.stop != nil {
			c.stop()
		}
		c.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		st := c.stats.Clone() // the counts as they are now; the journal is read after them
		c.mu.Unlock()
		if c.side != nil {
			c.side.confirm(r.Context(), &st)
		}
		_ = json.NewEncoder(w).Encode(&st)
	})
	srv := &http.Server{Addr: cmp.Or(os.Getenv("ADDR"), ":8080"), Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	slog.Info("fleetclient listening", "client", c.kind, "policy", c.policy, "dependency", c.depURL)
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// start begins a run: rate operations a second until /stop.
func (c *client) start(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	mode, id := q.Get("mode"), q.Get("run")
	rate, err := strconv.Atoi(q.Get("rate"))
	switch {
	case mode != modeNaive && mode != modeRetryguard:
		http.Error(w, fmt.Sprintf("mode=%q: want %s or %s", mode, modeNaive, modeRetryguard), http.StatusBadRequest)
		return
	case err != nil || rate < 1 || rate > 10000:
		http.Error(w, fmt.Sprintf("rate=%q: want operations a second, 1 to 10000", q.Get("rate")), http.StatusBadRequest)
		return
	case id == "":
		http.Error(w, "run: want the run's name, which every key carries", http.StatusBadRequest)
		return
	}
	st := newStats(id, mode, c.kind)
	if c.side != nil && mode == modeRetryguard {
		// The sidecar's journal before the run (read before the lock: it is
		// a request to the sidecar): what it holds after, less this, are the
		// run's letters.
		if err := c.side.begin(r.Context(), st); err != nil {
			http.Error(w, "the sidecar's journal: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stop != nil {
		http.Error(w, fmt.Sprintf("run %s is still going", c.stats.Run), http.StatusConflict)
		return
	}
	if _, ok := c.runs[id]; ok {
		http.Error(w, fmt.Sprintf("run %s has run before: keys must be new", id), http.StatusConflict)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.stop = cancel
	c.stats = st
	c.runs[id] = c.stats
	go c.generate(ctx, c.stats, mode, id, rate)
	w.WriteHeader(http.StatusNoContent)
}

// generate begins operation n at n/rate seconds after the start, whatever
// the earlier ones are doing (an open loop: users do not wait for the
// dependency to recover).
func (c *client) generate(ctx context.Context, st *clientstats.Stats, mode, id string, rate int) {
	begin := time.Now()
	for n := 0; ; n++ {
		due := begin.Add(time.Duration(n) * time.Second / time.Duration(rate))
		if d := time.Until(due); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				c.ended()
				return
			case <-t.C:
			}
		} else if ctx.Err() != nil {
			c.ended()
			return
		}
		late := float64(time.Since(due)) / float64(time.Millisecond)
		c.mu.Lock()
		st.MaxLateMs = max(st.MaxLateMs, late)
		if st.InFlight >= maxInFlight {
			st.Refused++
			c.mu.Unlock()
			continue
		}
		st.Started++
		st.InFlight++
		c.mu.Unlock()
		go c.operation(st, mode, id+"-"+strconv.Itoa(n))
	}
}

// newStats is an empty run's.
func newStats(id, mode, kind string) *clientstats.Stats {
	return &clientstats.Stats{Run: id, Mode: mode, Client: kind, Failed: map[string]int{}, Letters: map[string]int{}, Examples: map[string]string{}}
}

// ended lets a new run start once this one stopped beginning operations.
func (c *client) ended() {
	c.mu.Lock()
	c.stop = nil
	c.mu.Unlock()
}

// operation runs one operation to its end and counts it in st.
func (c *client) operation(st *clientstats.Stats, mode, op string) {
	var ok, unknown, lettered bool
	var code, detail string
	switch {
	case mode == modeNaive && c.grpc != nil:
		ok, unknown = c.grpc.naive(c.key(op))
		code = naiveCode
	case mode == modeNaive:
		ok, unknown = c.naive(op)
		code = naiveCode
	case c.grpc != nil:
		ok, code, detail, unknown = c.grpc.retryguard(c.pod, op)
	case c.side != nil:
		ok, code, detail, unknown, lettered = c.side.send(c.pod, op)
	default:
		ok, code, detail, unknown = c.retryguard(op)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if lettered {
		st.Letters[code]++
		if unknown {
			st.UnknownLetters++
		}
	}
	st.InFlight--
	switch {
	case ok:
		st.Succeeded++
	default:
		st.Failed[code]++
		if _, seen := st.Examples[code]; !seen {
			st.Examples[code] = detail
		}
		if unknown {
			st.Unknown++
		}
	}
}

// key is the operation's Idempotency-Key, as the policy's keyTemplate
// renders it from the same vars.
func (c *client) key(op string) string { return "DRILL-" + c.pod + "-" + op }

// naiveCode is a failed naive operation's code: it has no other.
const naiveCode = "naive: attempts exhausted"

// naive runs the operation with the naive chain; its outcome is unknown
// when its last attempt timed out (the dependency may have applied it).
func (c *client) naive(op string) (ok, unknown bool) {
	key := c.key(op)
	_, ok = naive.Do(context.Background(), func(ctx context.Context) bool {
		ctx, cancel := context.WithTimeout(ctx, naiveAttemptTimeout)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.depURL+"/v1/work", nil)
		if err != nil {
			return false
		}
		req.Header.Set("Idempotency-Key", key)
		res, err := c.plain.Do(req)
		unknown = err != nil
		if err != nil {
			return false
		}
		_, _ = io.Copy(io.Discard, res.Body)
		_ = res.Body.Close()
		return res.StatusCode < 300
	})
	return ok, unknown && !ok
}

// retryguard runs the operation through the RoundTripper; a failure's
// detail says why.
func (c *client) retryguard(op string) (ok bool, code, detail string, unknown bool) {
	ctx := retry.WithVars(context.Background(), retry.Vars{"pod": c.pod, "op": op})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.depURL+"/v1/work", nil)
	if err != nil {
		return false, "request", err.Error(), false
	}
	res, err := c.rg.Do(req)
	var re *retry.Error
	switch {
	case errors.As(err, &re):
		return false, string(re.Code), re.Error(), re.State == retry.UnknownOutcome
	case err != nil:
		return false, "transport", err.Error(), false
	}
	_, _ = io.Copy(io.Discard, res.Body)
	_ = res.Body.Close()
	if res.StatusCode >= 300 {
		return false, strconv.Itoa(res.StatusCode), res.Status, false
	}
	return true, "", "", false
}
