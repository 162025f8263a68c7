package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/retryguard/retryguard/hack/drills/fleet/clientstats"
	"github.com/retryguard/retryguard/proxy"
	"github.com/retryguard/retryguard/runtime/retry"
)

// sidecarAnswerWithin bounds one request to the sidecar, far past the
// policy's 4 s deadline, so that a sidecar that never answers leaves an
// operation failed (and lost, without a letter) rather than open forever.
const sidecarAnswerWithin = 30 * time.Second

// sidecar is a sidecar pod's way to the dependency: plain HTTP to the
// route the injected retryguard-proxy serves on localhost, the key's
// variables in Retryguard-Var-* headers, as any language sends them. It
// reads the sidecar's admin port for its policy view and its journal's
// count. It is safe for concurrent use.
type sidecar struct {
	route  string // the route's /v1/work
	admin  string // the admin port's base URL
	policy string
	hc     *http.Client
}

func newSidecar(routeURL, policy string) *sidecar {
	return &sidecar{
		route:  strings.TrimSuffix(routeURL, "/") + "/v1/work",
		admin:  "http://127.0.0.1:" + strconv.Itoa(proxy.DefaultAdminPort),
		policy: policy,
		hc:     &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 512}, Timeout: sidecarAnswerWithin},
	}
}

// send makes one operation through the sidecar. The answer is the
// dependency's, or the sidecar's problem, whose code and state are in its
// headers (docs/proxy.md, "What the application receives"): 202 in state
// UNKNOWN_OUTCOME is an operation that may have been applied. lettered says
// the sidecar kept the failure's letter: its state is one that is dead
// lettered (a refusal before any attempt, such as ERR_PROXY_BUSY, has no
// state and no letter), and the answer does not say the letter was
// dropped. A request that reached the sidecar and got no whole answer may
// have been applied: unknown, with no letter this pod can count.
func (s *sidecar) send(pod, op string) (ok bool, code, detail string, unknown, lettered bool) {
	var wrote atomic.Bool // set on the transport's writing goroutine
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { wrote.Store(true) }})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.route, nil)
	if err != nil {
		return false, "request", err.Error(), false, false
	}
	req.Header.Set(proxy.VarHeaderPrefix+"Pod", pod)
	req.Header.Set(proxy.VarHeaderPrefix+"Op", op)
	res, err := s.hc.Do(req)
	if err != nil {
		return false, "transport", err.Error(), wrote.Load(), false
	}
	body, err := io.ReadAll(io.LimitReader(res.Body, 4<<10))
	_ = res.Body.Close()
	if err != nil {
		return false, "transport", "the answer's body: " + err.Error(), true, false
	}
	code = res.Header.Get(proxy.CodeHeader)
	state := retry.State(res.Header.Get(proxy.StateHeader))
	switch {
	case code == "" && res.StatusCode < 300:
		return true, "", "", false, false
	case code == "":
		// The dependency's own answer, passed through.
		return false, strconv.Itoa(res.StatusCode), res.Status, false, false
	}
	unknown = res.StatusCode == http.StatusAccepted && state == retry.UnknownOutcome
	return false, code, strings.TrimSpace(string(body)), unknown, state.DeadLettered() && res.Header.Get(proxy.LetterHeader) != proxy.LetterDropped
}

// begin records in st how many letters the sidecar's journal holds before
// the run.
func (s *sidecar) begin(ctx context.Context, st *clientstats.Stats) error {
	n, err := s.journalLetters(ctx)
	if err != nil {
		return err
	}
	st.JournalBefore = n
	return nil
}

// confirm sets st.Unconfirmed, in a copy of the run's counts: the letters
// its answers said were kept that the journal's growth since begin does not
// hold. The journal is read after the counts were taken, and the sidecar
// writes a letter before it answers, so every letter counted is in the
// journal by then. A journal it cannot read confirms none.
func (s *sidecar) confirm(ctx context.Context, st *clientstats.Stats) {
	claimed := 0
	for _, k := range st.Letters {
		claimed += k
	}
	n, err := s.journalLetters(ctx)
	held := n - st.JournalBefore
	if err != nil {
		held = 0
	}
	st.Unconfirmed = max(0, claimed-held)
}

// journalLetters is the count of letters in the sidecar's journal: the
// drill runs without a topic, so none is forwarded and the count of
// unforwarded letters only grows.
func (s *sidecar) journalLetters(ctx context.Context) (int, error) {
	var tail struct {
		Unforwarded *int   `json:"unforwarded"`
		Error       string `json:"error"`
	}
	if err := s.get(ctx, "/deadletters?limit=1", &tail); err != nil {
		return 0, err
	}
	if tail.Unforwarded == nil {
		return 0, fmt.Errorf("/deadletters: no count of unforwarded letters (%s)", tail.Error)
	}
	return *tail.Unforwarded, nil
}

// healthz is 200 once the sidecar is ready and enforces the policy.
func (s *sidecar) healthz(w http.ResponseWriter, r *http.Request) {
	var v struct {
		Found bool `json:"found"`
	}
	if err := s.get(r.Context(), "/readyz", nil); err != nil {
		http.Error(w, "the sidecar: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	if err := s.get(r.Context(), "/policies/"+s.policy, &v); err != nil || !v.Found {
		http.Error(w, fmt.Sprintf("the sidecar does not enforce %s yet (%v)", s.policy, err), http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// policyView relays what the sidecar enforces for the policy: the shape of
// a Go client's /policy (policyview.View), which the drill reads alike.
func (s *sidecar) policyView(w http.ResponseWriter, r *http.Request) {
	var v json.RawMessage
	if err := s.get(r.Context(), "/policies/"+s.policy, &v); err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(v)
}

// get reads the admin port's path into out (nil: the status alone).
func (s *sidecar) get(ctx context.Context, path string, out any) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.admin+path, nil)
	if err != nil {
		return err
	}
	res, err := s.hc.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(res.Body, 512))
		return fmt.Errorf("%s: %s: %s", path, res.Status, strings.TrimSpace(string(b)))
	}
	if out == nil {
		_, _ = io.Copy(io.Discard, res.Body)
		return nil
	}
	return json.NewDecoder(io.LimitReader(res.Body, 1<<20)).Decode(out)
}
