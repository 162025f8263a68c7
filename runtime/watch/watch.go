// Package watch serves published policies to the runtime. A Watcher keeps
// the parsed policies of one namespace in an atomically swapped snapshot,
// from a ConfigMap informer (Informer) or a mounted directory (Files). A
// payload that does not parse keeps the last good policy of that name; a
// name never seen is unknown, which the runtime treats as one attempt.
package watch

import (
	"context"
	"maps"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/retryguard/retryguard/contract/policyconfig"
)

// Watcher serves the current policies. Policy is safe for concurrent use
// and never blocks.
type Watcher interface {
	// Policy returns the last good payload published under name.
	Policy(name string) (*policyconfig.Payload, bool)
	// Start runs the watcher until ctx ends, returning once the first full
	// view is loaded (or with the error that prevented it).
	Start(ctx context.Context) error
	// OnChange registers f to run after every applied change.
	OnChange(f func(name string))
}

// snapshot is an immutable view of the policies.
type snapshot map[string]*policyconfig.Payload

// store is the atomic snapshot shared by every Watcher.
type store struct {
	current  atomic.Pointer[snapshot]
	mu       sync.Mutex // serialises writers
	handlers []func(string)
	// Rejected counts payloads that did not parse (the last good one was kept).
	rejected atomic.Uint64
	// ignored counts payloads not trusted: not published by the operator,
	// or not for this namespace.
	ignored atomic.Uint64
}

func newStore() *store {
	s := &store{}
	empty := snapshot{}
	s.current.Store(&empty)
	return s
}

func (s *store) Policy(name string) (*policyconfig.Payload, bool) {
	p, ok := (*s.current.Load())[name]
	return p, ok
}

func (s *store) OnChange(f func(string)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.handlers = append(s.handlers, f)
}

// set applies one payload (nil deletes) by copy-on-write.
func (s *store) set(name string, p *policyconfig.Payload) {
	s.mu.Lock()
	next := maps.Clone(*s.current.Load())
	if p == nil {
		delete(next, name)
	} else {
		next[name] = p
	}
	s.current.Store(&next)
	handlers := s.handlers
	s.mu.Unlock()
	for _, h := range handlers {
		h(name)
	}
}

// apply parses data for name; on failure the last good payload stays and
// the error is returned for logging.
func (s *store) apply(name string, data []byte) error {
	p, err := policyconfig.Parse(data)
	if err != nil {
		s.rejected.Add(1)
		return err
	}
	s.set(name, p)
	return nil
}

// Rejected counts payloads that did not parse since start.
func (s *store) Rejected() uint64 { return s.rejected.Load() }

// Ignored counts payloads that were not trusted since start: a ConfigMap
// the operator did not publish, or a payload of another namespace.
func (s *store) Ignored() uint64 { return s.ignored.Load() }

// Store is the snapshot a Watcher outside this package serves from (the
// ConfigMap informer in runtime/watch/informer): Policy never blocks, Set
// swaps one entry in by copy-on-write and runs the OnChange handlers. It is
// safe for concurrent use.
type Store struct{ *store }

// NewStore returns an empty Store.
func NewStore() *Store { return &Store{newStore()} }

// Set serves p under name; nil removes name.
func (s *Store) Set(name string, p *policyconfig.Payload) { s.set(name, p) }

// Reject counts a payload that did not parse (the last good one stays).
func (s *Store) Reject() { s.rejected.Add(1) }

// Ignore counts a payload that was not trusted.
func (s *Store) Ignore() { s.ignored.Add(1) }

// Static serves a fixed set of policies: a fake for tests and examples.
type Static struct{ *store }

// NewStatic serves payloads under their policies' names.
func NewStatic(payloads ...*policyconfig.Payload) *Static {
	s := &Static{newStore()}
	for _, p := range payloads {
		s.set(p.Policy.Name, p)
	}
	return s
}

// Start does nothing: a static set is always loaded.
func (*Static) Start(context.Context) error { return nil }

// Manual is a fake whose policies a test changes at will, as a watcher
// would on updates: Set parses and keeps the last good payload on error.
type Manual struct{ *store }

// NewManual returns an empty manual watcher.
func NewManual() *Manual { return &Manual{newStore()} }

// Start does nothing.
func (*Manual) Start(context.Context) error { return nil }

// Set publishes a payload under name.
func (m *Manual) Set(name string, p *policyconfig.Payload) { m.set(name, p) }

// SetRaw applies raw bytes as an update would, keeping the last good payload
// when they do not parse.
func (m *Manual) SetRaw(name string, data []byte) error { return m.apply(name, data) }

// Delete removes name, which then gets one attempt.
func (m *Manual) Delete(name string) { m.set(name, nil) }

// Collector exposes a watcher's rejected payloads as the Prometheus counter
// retryguard_policy_payloads_rejected_total and, when the watcher counts
// them (Informer, Files), its untrusted ones as
// retryguard_policy_payloads_ignored_total.
func Collector(w interface{ Rejected() uint64 }) prometheus.Collector {
	c := collectors{prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "retryguard_policy_payloads_rejected_total",
		Help: "Published payloads that did not parse; the last good policy was kept.",
	}, func() float64 { return float64(w.Rejected()) })}
	if i, ok := w.(interface{ Ignored() uint64 }); ok {
		c = append(c, prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "retryguard_policy_payloads_ignored_total",
			Help: "Payloads not served because the operator did not publish them (labels, owner, name) or they name another namespace.",
		}, func() float64 { return float64(i.Ignored()) }))
	}
	return c
}

// collectors is several collectors registered as one.
type collectors []prometheus.Collector

func (c collectors) Describe(ch chan<- *prometheus.Desc) {
	for _, x := range c {
		x.Describe(ch)
	}
}

func (c collectors) Collect(ch chan<- prometheus.Metric) {
	for _, x := range c {
		x.Collect(ch)
	}
}
