package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/retryguard/retryguard/proxy"
	"github.com/retryguard/retryguard/runtime/deadletter"
	"github.com/retryguard/retryguard/runtime/retry"
)

// maxProblem bounds the problem body that the sidecar reads to add the
// letter member: the proxy's problems are a few hundred bytes.
const maxProblem = 64 << 10

// droppedKey carries a request's letter outcome from the sink to its answer.
type droppedKey struct{}

// keptSink is the journal as the executors' dead-letter sink: a letter it
// does not keep (the journal at its cap, or a failed write) is counted by
// reason and marked on its request, whose answer then says so.
type keptSink struct {
	journal *deadletter.Journal
	dropped *prometheus.CounterVec
}

func newKeptSink(j *deadletter.Journal, reg prometheus.Registerer) *keptSink {
	s := &keptSink{journal: j, dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "retryguard_proxy_dead_letters_dropped_total",
		Help: "Dead letters the sidecar did not keep, by reason: full (the journal at its cap) or error (the write failed).",
	}, []string{"reason"})}
	for _, reason := range []string{"full", "error"} {
		s.dropped.WithLabelValues(reason) // present at 0, so that increase() sees the first drop
	}
	reg.MustRegister(s.dropped)
	return s
}

func (s *keptSink) Write(ctx context.Context, l retry.DeadLetter) error {
	err := s.journal.Write(ctx, l)
	if err == nil {
		return nil
	}
	reason := "error"
	if errors.Is(err, deadletter.ErrFull) {
		reason = "full"
	}
	s.dropped.WithLabelValues(reason).Inc()
	if d, ok := ctx.Value(droppedKey{}).(*atomic.Bool); ok {
		d.Store(true)
	}
	return err
}

// tellDropped wraps a route listener's handler: when the request's letter
// was not kept, its answer carries proxy.LetterHeader, and a problem answer the
// member "letter": "dropped".
func tellDropped(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d := &atomic.Bool{}
		lw := &letterWriter{ResponseWriter: w, dropped: d}
		next.ServeHTTP(lw, r.WithContext(context.WithValue(r.Context(), droppedKey{}, d)))
		lw.finish()
	})
}

// letterWriter sets proxy.LetterHeader as the answer's header is written, and
// holds a problem body back to add the letter member to it.
type letterWriter struct {
	http.ResponseWriter
	dropped     *atomic.Bool
	wrote       bool
	status      int
	problem     *bytes.Buffer // the held problem body, when one is rewritten
	passThrough bool          // the held body outgrew maxProblem
}

func (lw *letterWriter) WriteHeader(status int) {
	if lw.wrote {
		return
	}
	lw.wrote = true
	h := lw.Header()
	h.Del(proxy.LetterHeader)
	if !lw.dropped.Load() {
		lw.ResponseWriter.WriteHeader(status)
		return
	}
	h.Set(proxy.LetterHeader, proxy.LetterDropped)
	if strings.HasPrefix(h.Get("Content-Type"), "application/problem+json") {
		lw.status, lw.problem = status, &bytes.Buffer{}
		h.Del("Content-Length")
		return
	}
	lw.ResponseWriter.WriteHeader(status)
}

func (lw *letterWriter) Write(p []byte) (int, error) {
	if !lw.wrote {
		lw.WriteHeader(http.StatusOK)
	}
	if lw.problem == nil {
		return lw.ResponseWriter.Write(p)
	}
	if lw.problem.Len()+len(p) > maxProblem {
		lw.flushHeld()
		return lw.ResponseWriter.Write(p)
	}
	return lw.problem.Write(p)
}

// finish writes a held problem with the letter member.
func (lw *letterWriter) finish() {
	if lw.problem == nil {
		return
	}
	var p map[string]any
	if json.Unmarshal(lw.problem.Bytes(), &p) != nil {
		lw.flushHeld()
		return
	}
	p["letter"] = proxy.LetterDropped
	data, err := json.Marshal(p)
	if err != nil {
		lw.flushHeld()
		return
	}
	lw.problem = nil
	lw.ResponseWriter.WriteHeader(lw.status)
	_, _ = lw.ResponseWriter.Write(append(data, '\n'))
}

// flushHeld writes a held body as it is: too long, or not a problem after all.
func (lw *letterWriter) flushHeld() {
	held := lw.problem
	lw.problem = nil
	lw.ResponseWriter.WriteHeader(lw.status)
	_, _ = lw.ResponseWriter.Write(held.Bytes())
}

// Unwrap lets http.ResponseController reach the connection (the proxy
// flushes streamed answers).
func (lw *letterWriter) Unwrap() http.ResponseWriter { return lw.ResponseWriter }
