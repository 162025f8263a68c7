package main

import (
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retryguard/retryguard/contract/codes"
	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/proxy"
	"github.com/retryguard/retryguard/runtime/deadletter"
	"github.com/retryguard/retryguard/runtime/retry"
	"github.com/retryguard/retryguard/runtime/watch"
)

// throughProxy is a sidecar pod's way to a loopback dependency that answers
// each request with answer(key), through the proxy package's real Proxy (the
// sidecar's routes, its RoundTripper, a real journal at the returned path).
func throughProxy(t *testing.T, answer func(w http.ResponseWriter, key string)) (*sidecar, string, *sync.Map) {
	t.Helper()
	keys := &sync.Map{} // key → attempts
	dep := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		n, _ := keys.LoadOrStore(key, new(int))
		*n.(*int)++
		answer(w, key)
	}))
	t.Cleanup(dep.Close)
	p, err := policyconfig.Parse([]byte(connectorPayload))
	if err != nil {
		t.Fatal(err)
	}
	p.Policy.Operation = "POST /v1/work"
	p.Policy.Backoff.Base, p.Policy.Backoff.Cap = policyconfig.Duration(time.Millisecond), policyconfig.Duration(2*time.Millisecond)
	path := filepath.Join(t.TempDir(), "deadletters.journal")
	j, err := deadletter.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = j.Close() })
	rt := proxy.NewRuntime(watch.NewStatic(p), &retry.Pools{}, nil, retry.WithDeadLetters(j))
	px, err := rt.New(&proxy.Table{Routes: []proxy.Route{{Port: 15001, PathPrefix: "/v1/", Policy: p.Policy.Name, Upstream: dep.URL}}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(px)
	t.Cleanup(srv.Close)
	return newSidecar(srv.URL, p.Policy.Name), path, keys
}

// A sidecar pod reads each answer as the application hears it: a success;
// retries exhausted, lettered; an attempt that timed out, an unknown outcome
// (202) whose letter the journal holds under that state. Every letter it
// counts is one the journal holds.
func TestASidecarPodReadsTheSidecarsAnswers(t *testing.T) {
	s, journal, keys := throughProxy(t, func(w http.ResponseWriter, key string) {
		switch key {
		case "DRILL-pod-1-ok":
			w.WriteHeader(http.StatusCreated)
		case "DRILL-pod-1-late":
			time.Sleep(400 * time.Millisecond) // past the 200 ms perAttemptTimeout
			w.WriteHeader(http.StatusCreated)
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	if ok, code, detail, unknown, lettered := s.send("pod-1", "ok"); !ok || code != "" || unknown || lettered {
		t.Errorf("a 201: ok=%t code=%q (%s) unknown=%t lettered=%t, want a success", ok, code, detail, unknown, lettered)
	}
	ok, code, detail, unknown, lettered := s.send("pod-1", "down")
	if ok || code != string(codes.RetryLimitExceeded) || unknown || !lettered {
		t.Errorf("503s: ok=%t code=%q (%s) unknown=%t lettered=%t, want %s, lettered", ok, code, detail, unknown, lettered, codes.RetryLimitExceeded)
	}
	if n, _ := keys.Load("DRILL-pod-1-down"); n == nil || *n.(*int) != 3 {
		t.Errorf("the dependency saw %v attempts of one key, want 3", n)
	}
	ok, code, detail, unknown, lettered = s.send("pod-1", "late")
	if ok || code != string(codes.UnknownOutcome) || !unknown || !lettered {
		t.Errorf("a late answer: ok=%t code=%q (%s) unknown=%t lettered=%t, want an unknown outcome, lettered", ok, code, detail, unknown, lettered)
	}
	// A request the sidecar refuses before any attempt (here: no route for
	// its path) has a code and no state, and no letter.
	elsewhere := newSidecar(strings.TrimSuffix(s.route, "/v1/work")+"/elsewhere", s.policy)
	if ok, code, detail, unknown, lettered := elsewhere.send("pod-1", "lost"); ok || code == "" || unknown || lettered {
		t.Errorf("no route: ok=%t code=%q (%s) unknown=%t lettered=%t, want a refusal without a letter", ok, code, detail, unknown, lettered)
	}
	letters, err := deadletter.ReadAll(journal)
	if err != nil {
		t.Fatal(err)
	}
	byKey := map[string]retry.State{}
	for _, l := range letters {
		byKey[l.Key] = l.State
	}
	if len(letters) != 2 || byKey["DRILL-pod-1-down"] != retry.TerminalExhausted || byKey["DRILL-pod-1-late"] != retry.UnknownOutcome {
		t.Errorf("the journal holds %v, want the two failures' letters, the late one UNKNOWN_OUTCOME", byKey)
	}
}

// A sidecar that answers no request at all leaves the operation failed and
// unlettered: the pod cannot count a letter it was not told of.
func TestASidecarPodCountsNoLetterWithoutAnAnswer(t *testing.T) {
	s := newSidecar("http://127.0.0.1:1", "drill-connector") // nothing listens on port 1
	if ok, code, _, unknown, lettered := s.send("pod-1", "x"); ok || code != "transport" || unknown || lettered {
		t.Errorf("ok=%t code=%q unknown=%t lettered=%t, want a transport failure, not sent, no letter", ok, code, unknown, lettered)
	}
}
