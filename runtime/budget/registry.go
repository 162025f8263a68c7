package budget

import (
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/runtime/clock"
)

// ConfigOf is the one way from a payload's resolved budget to a Config:
// every figure the budget enforces, and its consumer count as the pod whose
// UID is pod reads it (whether the count names it), nothing hand-copied
// elsewhere.
func ConfigOf(b *policyconfig.Budget, pod string) Config {
	c := Config{RetryPercent: b.RetryPercent, Window: b.Window.D(), MaxTokens: b.MaxTokens,
		MinRetriesPerSecond: b.MinRetriesPerSecond, Partitions: b.Partitions}
	// The pointers are the payload's, not copies: ConfigOf runs for every
	// operation (Registry.Resolve), and only what is kept is copied (clone,
	// where the Registry and a Budget store a Config).
	c.MaxRetriesPerSecond = b.MaxRetriesPerSecond
	// A Counted budget without a count joined (its ConfigMap not read yet,
	// deleted, or for another UID) is counted by no one: no share. A count
	// inlined by a controller that predates the budget's ConfigMap comes
	// without Counted, and counts it all the same.
	c.Counted = b.Counted || b.Consumers != nil
	if n := b.Consumers; n != nil {
		c.Consumers, c.Included = n, n.Includes(pod)
	}
	return c
}

// PodUIDEnv is the environment variable a pod's UID comes from: set it from
// the downward API (fieldRef metadata.uid). A pod without it is named by no
// consumer count, and takes no share of a counted budget.
const PodUIDEnv = "POD_UID"

// Registry holds one Budget per RetryBudget (namespace/name), shared by
// every policy that names it. Each payload carries the budget's UID, figures
// and generation: a new UID (the budget was deleted and created again) gives
// the entry the new budget's figures and count, and keeps its window and
// tokens (see Resolve); within one UID the newest generation's figures win,
// so a payload cannot rewrite the budget other policies' operations draw
// on. A payload may also carry the budget's consumer count; the count the
// controller took last wins, whichever policy's payload brought it.
//
// A share is the process's, not the registry's: every Registry of one
// process on the same clock, for the same pod UID and the same kind of
// source (see WithDelivery), holds the same budgets, so a process with
// several executors, each with its own registry, still holds one share of
// each budget. Each container of a pod is a process of its own: the
// containers that call through a counted budget each take a share, so give
// POD_UID to one container only (the others then take no share of it).
// It is safe for concurrent use.
type Registry struct {
	clock clock.Clock
	// pod is this pod's UID, which a count must name to give it a share.
	pod string
	// delivery is how late the payload source may deliver a change.
	delivery  time.Duration
	logger    *slog.Logger
	conflicts atomic.Uint64
	*table
}

// table is the budgets of one process's pod identity on one clock.
type table struct {
	mu      sync.RWMutex
	budgets map[string]*entry
}

// tableKey names a table: a clock, a pod UID, and whether the pod's
// payloads arrive later than the delivery bound.
type tableKey struct {
	clock    clock.Clock
	pod      string
	unshared bool
}

// tables holds the process's tables (tableKey → *table).
var tables sync.Map

// tableOf returns the process's table for r's clock, pod and source: the
// same one for every registry that shares them. A clock that cannot key a
// map gets a table of its own.
func tableOf(r *Registry) *table {
	if !reflect.ValueOf(r.clock).Comparable() {
		return &table{budgets: map[string]*entry{}}
	}
	t, _ := tables.LoadOrStore(tableKey{r.clock, r.pod, r.unshared()}, &table{budgets: map[string]*entry{}})
	return t.(*table)
}

// unshared says r's source delivers later than the delivery bound.
func (r *Registry) unshared() bool { return r.delivery > policyconfig.ConsumerCountDelivery }

type entry struct {
	budget *Budget
	// config is what the budget enforces; offered is the same as the
	// payload carried it, its count dated on the controller's clock.
	config, offered Config
	generation      int64
	uid             string
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
// (a DeliveryBound() time.Duration method); a Source that states none
// takes no share of a counted budget.
func WithDelivery(d time.Duration) RegistryOption { return func(r *Registry) { r.delivery = d } }

// NewRegistry returns an empty registry on clk (the real clock when nil).
func NewRegistry(clk clock.Clock, opts ...RegistryOption) *Registry {
	if clk == nil {
		clk = clock.Real{}
	}
	r := &Registry{clock: clk, pod: os.Getenv(PodUIDEnv), logger: slog.Default()}
	for _, o := range opts {
		o(r)
	}
	r.table = tableOf(r)
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
	return fmt.Sprintf("budget %s: a payload's generation %d figures %s were not applied; generation %d figures %s stay",
		c.Budget, c.Generation, figuresText(c.Offered), c.KeptGeneration, figuresText(c.Kept))
}

// figuresText is c's figures as a Conflict reports them: the allowance by
// its value (none when unset), not by its address.
func figuresText(c Config) string {
	limit := "none"
	if m := c.MaxRetriesPerSecond; m != nil {
		limit = strconv.Itoa(int(*m))
	}
	return fmt.Sprintf("{RetryPercent:%d Window:%s MaxTokens:%d MinRetriesPerSecond:%d Partitions:%d MaxRetriesPerSecond:%s}",
		c.RetryPercent, c.Window, c.MaxTokens, c.MinRetriesPerSecond, c.Partitions, limit)
}

// Resolve returns the budget a payload of namespace names. The first
// payload creates it; a new UID (the budget deleted and created again)
// replaces its figures and count, and clamps its tokens to the new
// capacity, keeping its window and its start credit, so that a recreation
// grants no second burst: the window's retries still count against
// retryPercent (INV-RTY-04: "over any 60-second rolling window"). A newer
// generation updates its figures (keeping its tokens). Figures of an older
// generation, other figures under the same generation, or a retired UID are
// not applied: Resolve still returns the budget, with a *Conflict that it
// has also logged and counted. A consumer count is applied when the
// controller took it after the one the budget holds, from a payload of the
// budget's generation or a newer one; a newer generation without a count
// (its budget selects no consumers any more) drops the count.
//
// Counts are ordered by their observedAt against each other, both on the
// controller's clock, never against this pod's clock: a pod whose clock
// runs behind still takes every newer count. A count dated more than the
// clock skew ahead of this pod's clock is enforced as if taken when the pod
// read it, so its lease runs from then (see Denominator). A controller
// whose clock steps back publishes counts older than the one held: they
// are refused until its clock passes it, and the held count goes stale
// meanwhile, which gives no share: fewer retries, never more.
func (r *Registry) Resolve(namespace string, b *policyconfig.Budget) (*Budget, error) {
	key, offered := b.Key(namespace), ConfigOf(b, r.pod)
	r.mu.RLock()
	e, ok := r.budgets[key]
	if ok && e.uid == b.UID && e.generation == b.Generation && equal(e.offered, offered) {
		r.mu.RUnlock()
		return e.budget, nil
	}
	r.mu.RUnlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok = r.budgets[key]
	offered = offered.clone() // kept below; the payload's may change
	c := offered
	if now := r.clock.Now(); c.Consumers != nil && c.Consumers.ObservedAt.After(now.Add(policyconfig.ConsumerCountClockSkew)) {
		// A copy: offered keeps the date the controller gave it.
		dated := *c.Consumers
		dated.ObservedAt, c.Consumers = now, &dated
	}
	switch {
	case !ok:
		unshared := func(nb *Budget) { nb.unshared = r.unshared() }
		e = &entry{budget: New(c, r.clock, unshared), config: c, offered: offered, generation: b.Generation, uid: b.UID}
		r.budgets[key] = e
		r.explainNoShare(key, c)
		return e.budget, nil
	case b.UID != e.uid:
		if slices.Contains(e.retired, b.UID) {
			return e.budget, r.conflict(&Conflict{Budget: key, UID: b.UID, Generation: b.Generation, Offered: c,
				KeptUID: e.uid, KeptGeneration: e.generation, Kept: e.config})
		}
		// The budget was deleted and created again: new figures and a new
		// count, whatever its date, and generations that start again.
		// Policies that drew on the old one hold this same *Budget, which
		// keeps its window, its start credit and its tokens (clamped):
		// the same pod's retries, the same 60 s window.
		e.retired = append(e.retired, e.uid)
		e.retired = e.retired[max(0, len(e.retired)-maxRetiredUIDs):]
		e.uid, e.generation, e.config, e.offered = b.UID, b.Generation, c, offered
		e.budget.Update(c)
		return e.budget, nil
	case b.Generation > e.generation:
		if !newerCount(offered, e.offered) && offered.Counted {
			// An older count never replaces a newer one. The same count
			// keeps what it says of this pod now (its shard may have
			// dropped it since): a removal is never undone.
			included, same := offered.Included, sameCount(offered.Consumers, e.offered.Consumers)
			c, offered = withCountOf(c, e.config), withCountOf(offered, e.offered)
			if same {
				c.Included, offered.Included = included, included
			}
		}
		e.generation = b.Generation
	case !equal(c.figures(), e.config.figures()):
		return e.budget, r.conflict(&Conflict{Budget: key, UID: b.UID, Generation: b.Generation, Offered: c,
			KeptUID: e.uid, KeptGeneration: e.generation, Kept: e.config})
	case b.Generation == e.generation && newerCount(offered, e.offered):
	case b.Generation == e.generation && offered.Counted && sameCount(offered.Consumers, e.offered.Consumers) && offered.Included != e.offered.Included:
		// The same count now names this pod, or no longer does: its shard
		// of the members changed (policyconfig.Count.WithShards), which
		// needs no new count. A share that grows waits the delivery bound.
	default:
		return e.budget, nil
	}
	if !equal(c, e.config) {
		e.budget.Update(c)
		e.config = c
	}
	e.offered = offered
	return e.budget, nil
}

// conflict logs and counts a payload the registry did not apply.
func (r *Registry) conflict(c *Conflict) *Conflict {
	// Copies: a caller that changes what the report points to changes no
	// budget's record.
	c.Offered, c.Kept = c.Offered.clone(), c.Kept.clone()
	r.conflicts.Add(1)
	r.logger.Warn("retry budget figures not applied", "budget", c.Budget, "generation", c.Generation,
		"keptGeneration", c.KeptGeneration, "reason", c.Error())
	return c
}

// explainNoShare logs, once per budget, why this pod can take no share of
// a counted budget whatever the counts say.
func (r *Registry) explainNoShare(key string, c Config) {
	switch {
	case !c.Counted:
	case r.unshared():
		r.logger.Warn("no share of a fleet budget: this pod's payloads arrive later than the delivery bound, so it makes no retry under it",
			"budget", key, "delivery", r.delivery, "bound", policyconfig.ConsumerCountDelivery, "denial", SlowDelivery)
	case r.pod == "":
		r.logger.Warn("no share of a fleet budget: this pod has no identity, so no consumer count names it; set "+PodUIDEnv+
			" from the downward API (fieldRef metadata.uid)", "budget", key, "denial", NoShare)
	}
}

// newerCount says offered's count was taken after kept's (or is the first
// one), both dated on the controller's clock.
func newerCount(offered, kept Config) bool {
	return offered.Counted && (!kept.Counted || observedAt(offered).After(observedAt(kept)))
}

// observedAt is when c's count was taken: the zero time when none is joined.
func observedAt(c Config) time.Time {
	if c.Consumers == nil {
		return time.Time{}
	}
	return c.Consumers.ObservedAt
}

// Conflicts counts the payloads whose figures Resolve did not apply.
func (r *Registry) Conflicts() uint64 { return r.conflicts.Load() }
