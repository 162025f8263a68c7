package budget

import (
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retryguard/retryguard/runtime/clock"
	"github.com/retryguard/retryguard/runtime/policyconfig"
)

// ConfigOf is the one way from a payload's resolved budget to a Config:
// every figure the budget enforces, and its consumer count as the pod whose
// UID is pod reads it (whether the count names it), nothing hand-copied
// elsewhere.
func ConfigOf(b *policyconfig.Budget, pod string) Config {
	c := Config{RetryPercent: b.RetryPercent, Window: b.Window.D(), MaxTokens: b.MaxTokens,
		MinRetriesPerSecond: b.MinRetriesPerSecond, Partitions: b.Partitions}
	if b.MaxRetriesPerSecond != nil {
		c.MaxRetriesPerSecond, c.LimitRetriesPerSecond = *b.MaxRetriesPerSecond, true
	}
	if b.Consumers != nil {
		c.Consumers = Consumers{Counted: true, N: b.Consumers.Count, ObservedAt: b.Consumers.ObservedAt,
			Included: b.Consumers.Includes(pod)}
	}
	return c
}

// PodUIDEnv is the environment variable a pod's UID comes from: set it from
// the downward API (fieldRef metadata.uid). A pod without it is named by no
// consumer count, and takes no share of a counted budget.
const PodUIDEnv = "POD_UID"

// Registry holds one Budget per RetryBudget (namespace/name), shared by
// every policy that names it. Each payload carries the budget's UID, figures
// and generation: a new UID (the budget was deleted and created again) makes
// the entry a new budget, its figures, tokens and count; within one UID the
// newest generation's figures win, so a payload cannot rewrite the budget
// other policies' operations draw on. A payload may also carry the budget's
// consumer count; the most recently taken count wins, whichever policy's
// payload brought it. It is safe for concurrent use.
type Registry struct {
	clock clock.Clock
	// pod is this pod's UID, which a count must name to give it a share.
	pod string
	// delivery is how late the payload source may deliver a change.
	delivery  time.Duration
	logger    *slog.Logger
	conflicts atomic.Uint64
	mu        sync.RWMutex
	budgets   map[string]*entry
}

type entry struct {
	budget     *Budget
	config     Config
	generation int64
	uid        string
	// retired are the UIDs this name had before: a payload of a deleted
	// budget never replaces its successor (the last maxRetiredUIDs).
	retired []string
}

// maxRetiredUIDs bounds the UIDs a registry entry remembers.
const maxRetiredUIDs = 8

// RegistryOption configures a Registry.
type RegistryOption func(*Registry)

// WithLogger sends the registry's conflict reports to l (slog.Default()
// unless set).
func WithLogger(l *slog.Logger) RegistryOption { return func(r *Registry) { r.logger = l } }

// WithPod sets this pod's UID ($POD_UID unless set): a consumer count gives
// the pod a share only when it names this UID.
func WithPod(uid string) RegistryOption { return func(r *Registry) { r.pod = uid } }

// WithDelivery says how late the payload source may deliver a change to
// this process. Above policyconfig.ConsumerCountDelivery (a mounted
// ConfigMap volume, which the kubelet refreshes in a minute or more), the
// pods whose shares shrink cannot be relied on to hear of it before a
// share grows elsewhere, nor within the count's lease: the pod then takes
// no share of a counted budget's absolute figures (denial SlowDelivery),
// and logs why once per budget. retry.New passes the bound a Source states
// (a DeliveryBound() time.Duration method).
func WithDelivery(d time.Duration) RegistryOption { return func(r *Registry) { r.delivery = d } }

// NewRegistry returns an empty registry on clk (the real clock when nil).
func NewRegistry(clk clock.Clock, opts ...RegistryOption) *Registry {
	if clk == nil {
		clk = clock.Real{}
	}
	r := &Registry{clock: clk, pod: os.Getenv(PodUIDEnv), logger: slog.Default(), budgets: map[string]*entry{}}
	for _, o := range opts {
		o(r)
	}
	return r
}

// Conflict reports payload figures the registry did not apply: an older
// generation than the budget's (a payload not yet republished), the same
// generation with other figures (which the controllers never publish), or
// a UID the budget's name had before it was created again.
// A consumer count is not a figure: a newer count under the same
// generation is applied, an older one is ignored, neither is a Conflict.
type Conflict struct {
	// Budget is namespace/name.
	Budget string
	// UID, Generation and Offered are what the payload carried.
	UID        string
	Generation int64
	Offered    Config
	// KeptUID, KeptGeneration and Kept are what the budget enforces.
	KeptUID        string
	KeptGeneration int64
	Kept           Config
}

func (c *Conflict) Error() string {
	if c.UID != c.KeptUID {
		return fmt.Sprintf("budget %s: a payload of its deleted incarnation (uid %q) was not applied; uid %q stays", c.Budget, c.UID, c.KeptUID)
	}
	return fmt.Sprintf("budget %s: a payload's generation %d figures %+v were not applied; generation %d figures %+v stay",
		c.Budget, c.Generation, c.Offered, c.KeptGeneration, c.Kept)
}

// Resolve returns the budget a payload of namespace names. The first
// payload creates it; a new UID resets it to a new budget; a newer
// generation updates its figures (keeping its tokens). Figures of an older
// generation, other figures under the same generation, or a retired UID are
// not applied: Resolve still returns the budget, with a *Conflict that it
// has also logged and counted. A consumer count is applied when it was
// taken after the one the budget holds, from a payload of the budget's
// generation or a newer one; a newer generation without a count (its budget
// selects no consumers any more) drops the count.
func (r *Registry) Resolve(namespace string, b *policyconfig.Budget) (*Budget, error) {
	key, c := b.Key(namespace), ConfigOf(b, r.pod)
	if c.Consumers.Counted && c.Consumers.ObservedAt.After(r.clock.Now().Add(policyconfig.ConsumerCountClockSkew)) {
		// A count from the future (a controller clock far ahead) is held
		// as a stale one, so that the next true count replaces it rather
		// than losing to it until that future comes.
		c.Consumers.ObservedAt = time.Time{}
	}
	r.mu.RLock()
	e, ok := r.budgets[key]
	if ok && e.uid == b.UID && e.generation == b.Generation && e.config == c {
		r.mu.RUnlock()
		return e.budget, nil
	}
	r.mu.RUnlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok = r.budgets[key]
	switch {
	case !ok:
		unshared := func(nb *Budget) { nb.unshared = r.delivery > policyconfig.ConsumerCountDelivery }
		e = &entry{budget: New(c, r.clock, unshared), config: c, generation: b.Generation, uid: b.UID}
		r.budgets[key] = e
		r.explainNoShare(key, c)
		return e.budget, nil
	case b.UID != e.uid:
		if slices.Contains(e.retired, b.UID) {
			return e.budget, r.conflict(&Conflict{Budget: key, UID: b.UID, Generation: b.Generation, Offered: c,
				KeptUID: e.uid, KeptGeneration: e.generation, Kept: e.config})
		}
		// The budget was deleted and created again: a new budget, whose
		// generations start again. Policies that drew on the old one hold
		// this same *Budget, so it is reset in place.
		e.retired = append(e.retired, e.uid)
		e.retired = e.retired[max(0, len(e.retired)-maxRetiredUIDs):]
		e.uid, e.generation, e.config = b.UID, b.Generation, c
		e.budget.mu.Lock()
		e.budget.reset(c, r.clock.Now())
		e.budget.mu.Unlock()
		return e.budget, nil
	case b.Generation > e.generation:
		if !newerCount(c.Consumers, e.config.Consumers) && c.Consumers.Counted {
			c.Consumers = e.config.Consumers // an older count never replaces a newer one
		}
		e.generation = b.Generation
	case c.figures() != e.config.figures():
		return e.budget, r.conflict(&Conflict{Budget: key, UID: b.UID, Generation: b.Generation, Offered: c,
			KeptUID: e.uid, KeptGeneration: e.generation, Kept: e.config})
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

// conflict logs and counts a payload the registry did not apply.
func (r *Registry) conflict(c *Conflict) *Conflict {
	r.conflicts.Add(1)
	r.logger.Warn("retry budget figures not applied", "budget", c.Budget, "generation", c.Generation,
		"keptGeneration", c.KeptGeneration, "reason", c.Error())
	return c
}

// explainNoShare logs, once per budget, why this pod can take no share of
// a counted budget whatever the counts say.
func (r *Registry) explainNoShare(key string, c Config) {
	switch {
	case !c.Consumers.Counted:
	case r.delivery > policyconfig.ConsumerCountDelivery:
		r.logger.Warn("no share of a fleet budget: this pod's payloads arrive later than the delivery bound, so it makes no retry under it",
			"budget", key, "delivery", r.delivery, "bound", policyconfig.ConsumerCountDelivery, "denial", SlowDelivery)
	case r.pod == "":
		r.logger.Warn("no share of a fleet budget: this pod has no identity, so no consumer count names it; set "+PodUIDEnv+
			" from the downward API (fieldRef metadata.uid)", "budget", key, "denial", NoShare)
	}
}

// newerCount says offered is a count taken after kept (or the first one).
func newerCount(offered, kept Consumers) bool {
	return offered.Counted && (!kept.Counted || offered.ObservedAt.After(kept.ObservedAt))
}

// Conflicts counts the payloads whose figures Resolve did not apply.
func (r *Registry) Conflicts() uint64 { return r.conflicts.Load() }
