package budget

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/retryguard/retryguard/runtime/clock"
	"github.com/retryguard/retryguard/runtime/policyconfig"
)

// ConfigOf is the one way from a payload's resolved budget to a Config:
// every figure the budget enforces, and nothing hand-copied elsewhere.
func ConfigOf(b *policyconfig.Budget) Config {
	return Config{RetryPercent: b.RetryPercent, Window: b.Window.D(), MaxTokens: b.MaxTokens,
		MinRetriesPerSecond: b.MinRetriesPerSecond, Partitions: b.Partitions}
}

// Registry holds one Budget per RetryBudget (namespace/name), shared by
// every policy that names it. Each payload carries the budget's figures
// and generation; the newest generation's figures win, so a payload cannot
// rewrite the budget other policies' operations draw on. It is safe for
// concurrent use.
type Registry struct {
	clock     clock.Clock
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

// NewRegistry returns an empty registry on clk (the real clock when nil).
func NewRegistry(clk clock.Clock, opts ...RegistryOption) *Registry {
	r := &Registry{clock: clk, logger: slog.Default(), budgets: map[string]*entry{}}
	for _, o := range opts {
		o(r)
	}
	return r
}

// Conflict reports payload figures the registry did not apply: an older
// generation than the budget's (a payload not yet republished), or the
// same generation with other figures (which the controllers never publish).
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
// payload creates it full; a newer generation updates its figures (keeping
// its tokens). Figures of an older generation, or other figures under the
// same generation, are not applied: Resolve still returns the budget, with
// a *Conflict that it has also logged and counted.
func (r *Registry) Resolve(namespace string, b *policyconfig.Budget) (*Budget, error) {
	key, c := b.Key(namespace), ConfigOf(b)
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
		e = &entry{budget: New(c, r.clock), config: c, generation: b.Generation}
		r.budgets[key] = e
	case b.Generation > e.generation:
		if e.config != c {
			e.budget.Update(c)
			e.config = c
		}
		e.generation = b.Generation
	case e.config != c:
		conflict := &Conflict{Budget: key, Generation: b.Generation, Offered: c, KeptGeneration: e.generation, Kept: e.config}
		r.conflicts.Add(1)
		r.logger.Warn("retry budget figures not applied", "budget", key, "generation", b.Generation,
			"keptGeneration", e.generation, "reason", conflict.Error())
		return e.budget, conflict
	}
	return e.budget, nil
}

// Conflicts counts the payloads whose figures Resolve did not apply.
func (r *Registry) Conflicts() uint64 { return r.conflicts.Load() }
