package budget

import (
	"sync"

	"github.com/retryguard/retryguard/runtime/clock"
)

// Registry holds one Budget per RetryBudget ("namespace/name"), shared by
// every policy that names it. It is safe for concurrent use.
type Registry struct {
	clock   clock.Clock
	mu      sync.RWMutex
	budgets map[string]*entry
}

type entry struct {
	budget *Budget
	config Config
}

// NewRegistry returns an empty registry on clk (the real clock when nil).
func NewRegistry(clk clock.Clock) *Registry {
	return &Registry{clock: clk, budgets: map[string]*entry{}}
}

// Get returns the budget for key with the given figures, creating it full on
// first use and updating its figures (keeping its tokens) when they change.
func (r *Registry) Get(key string, c Config) *Budget {
	r.mu.RLock()
	e, ok := r.budgets[key]
	r.mu.RUnlock()
	if ok && e.config == c {
		return e.budget
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok = r.budgets[key]; ok {
		if e.config != c {
			e.budget.Update(c)
			e.config = c
		}
		return e.budget
	}
	e = &entry{budget: New(c, r.clock), config: c}
	r.budgets[key] = e
	return e.budget
}
