package legacy

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retryguard/retryguard/runtime/clock"
	"github.com/retryguard/retryguard/runtime/policyconfig"
)

// ConfigOf is the one way from a payload's resolved budget to a Config:
// every figure the budget enforces, and its consumer count, nothing
// hand-copied elsewhere.
func ConfigOf(b *policyconfig.Budget) Config {
	c := Config{RetryPercent: b.RetryPercent, Window: b.Window.D(), MaxTokens: b.MaxTokens,
		MinRetriesPerSecond: b.MinRetriesPerSecond, Partitions: b.Partitions}
	if b.MaxRetriesPerSecond != nil {
		c.MaxRetriesPerSecond, c.LimitRetriesPerSecond = *b.MaxRetriesPerSecond, true
	}
	if b.Consumers != nil {
		c.Consumers = Consumers{Counted: true, N: b.Consumers.Count, ObservedAt: b.Consumers.ObservedAt}
	}
	return c
}

// Registry holds one Budget per RetryBudget (namespace/name), shared by
// every policy that names it. Each payload carries the budget's figures
// and generation; the newest generation's figures win, so a payload cannot
// rewrite the budget other policies' operations draw on. A payload may
// also carry the budget's consumer count; the most recently taken count
// wins, whichever policy's payload brought it. It is safe for concurrent
// use.
type Registry struct {
	clock clock.Clock
	// start is when this process started, on clock: the registry's
	// creation unless WithStart says otherwise. Every budget judges
	// whether a consumer count includes this process by it.
	start     time.Time
	logger    *slog.Logger
	conflicts atomic.Uint64
	mu        sync.RWMutex
	budgets   map[string]*entry
}

type entry struct {
	budget     *Budget
	config     Config
	generation int64
}

// RegistryOption configures a Registry.
type RegistryOption func(*Registry)

// WithLogger sends the registry's conflict reports to l (slog.Default()
// unless set).
func WithLogger(l *slog.Logger) RegistryOption { return func(r *Registry) { r.logger = l } }

// WithStart sets when this process started, on the registry's clock (the
// registry's creation unless set). Create the registry, or the executor
// that makes one, as the process starts; a later start only delays a
// pod's share, an earlier one could let a count that missed the pod
// grant it a share.
func WithStart(t time.Time) RegistryOption { return func(r *Registry) { r.start = t } }

// NewRegistry returns an empty registry on clk (the real clock when nil).
func NewRegistry(clk clock.Clock, opts ...RegistryOption) *Registry {
	if clk == nil {
		clk = clock.Real{}
	}
	r := &Registry{clock: clk, start: clk.Now(), logger: slog.Default(), budgets: map[string]*entry{}}
	for _, o := range opts {
		o(r)
	}
	return r
}

// Conflict reports payload figures the registry did not apply: an older
// generation than the budget's (a payload not yet republished), or the
// same generation with other figures (which the controllers never publish).
// A consumer count is not a figure: a newer count under the same
// generation is applied, an older one is ignored, neither is a Conflict.
type Conflict struct {
	// Budget is namespace/name.
	Budget string
	// Generation and Offered are what the payload carried.
	Generation int64
	Offered    Config
	// KeptGeneration and Kept are what the budget enforces.
	KeptGeneration int64
	Kept           Config
}

func (c *Conflict) Error() string {
	return fmt.Sprintf("budget %s: a payload's generation %d figures %+v were not applied; generation %d figures %+v stay",
		c.Budget, c.Generation, c.Offered, c.KeptGeneration, c.Kept)
}

// Resolve returns the budget a payload of namespace names. The first
// payload creates it; a newer generation updates its figures (keeping its
// tokens). Figures of an older generation, or other figures under the same
// generation, are not applied: Resolve still returns the budget, with a
// *Conflict that it has also logged and counted. A consumer count is
// applied when it was taken after the one the budget holds, from a payload
// of the budget's generation or a newer one; a newer generation without a
// count (its budget selects no consumers any more) drops the count.
func (r *Registry) Resolve(namespace string, b *policyconfig.Budget) (*Budget, error) {
	key, c := b.Key(namespace), ConfigOf(b)
	if c.Consumers.Counted && c.Consumers.ObservedAt.After(r.clock.Now().Add(policyconfig.ConsumerCountClockSkew)) {
		// A count from the future (a controller clock far ahead) is held
		// as a stale one, so that the next true count replaces it rather
		// than losing to it until that future comes.
		c.Consumers.ObservedAt = time.Time{}
	}
	r.mu.RLock()
	e, ok := r.budgets[key]
	if ok && e.generation == b.Generation && e.config == c {
		r.mu.RUnlock()
		return e.budget, nil
	}
	r.mu.RUnlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok = r.budgets[key]
	switch {
	case !ok:
		e = &entry{budget: New(c, r.clock, StartedAt(r.start)), config: c, generation: b.Generation}
		r.budgets[key] = e
		return e.budget, nil
	case b.Generation > e.generation:
		if !newerCount(c.Consumers, e.config.Consumers) && c.Consumers.Counted {
			c.Consumers = e.config.Consumers // an older count never replaces a newer one
		}
		e.generation = b.Generation
	case c.figures() != e.config.figures():
		conflict := &Conflict{Budget: key, Generation: b.Generation, Offered: c, KeptGeneration: e.generation, Kept: e.config}
		r.conflicts.Add(1)
		r.logger.Warn("retry budget figures not applied", "budget", key, "generation", b.Generation,
			"keptGeneration", e.generation, "reason", conflict.Error())
		return e.budget, conflict
	case b.Generation == e.generation && newerCount(c.Consumers, e.config.Consumers):
	default:
		return e.budget, nil
	}
	if c != e.config {
		e.budget.Update(c)
		e.config = c
	}
	return e.budget, nil
}

// newerCount says offered is a count taken after kept (or the first one).
func newerCount(offered, kept Consumers) bool {
	return offered.Counted && (!kept.Counted || offered.ObservedAt.After(kept.ObservedAt))
}

// Conflicts counts the payloads whose figures Resolve did not apply.
func (r *Registry) Conflicts() uint64 { return r.conflicts.Load() }
