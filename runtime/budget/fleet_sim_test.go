package budget

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/runtime/clock"
)

// The fleet simulation: RG-LOAD's toy on a virtual clock ("Partition a
// total 20/s retry allowance … define behavior when budget coordination
// fails"). A base of 100 primaries/s spread over the live pods, a
// dependency that fails every call (or, for the greedy caller, one whose
// every primary deposits and then asks for retries until refused). Each pod
// is its own process with its own registry, as separate pods are; they read
// the payloads of a simulated controller that counts the pod objects its
// cache shows, names them, and republishes on every change and every
// ConsumerCountRefresh; each pod reads each payload after its own delivery
// lag. Each scenario asserts, in every second, that the budget holds.
//
// The scenarios were written for the ways the rules before issue 19 broke;
// docs/runtime.md ("Fleet budgets") keeps those rules' figures, measured in
// the same run as these before the old rules were deleted.
const (
	simStep = 10 * time.Millisecond // one primary per step: 100/s
	// simCacheLag is how far the controller's view of pod objects trails
	// the API server: it recounts, and publishes, that long after a change.
	simCacheLag = 500 * time.Millisecond
	simAttempts = 10 // a failure asks for up to 9 retries, stopping at the first refusal
	// simMountedDelivery is the delivery bound a mounted volume states:
	// the kubelet's sync period and its cache's TTL.
	simMountedDelivery = 90 * time.Second
)

// simFigures is a scenario's budget as its payload carries it, without
// the count: before and after a recreation.
type simFigures struct {
	uid        string
	generation int64
	percent    int32
	window     time.Duration
	tokens     int32
	floor      int32
	partitions int32
	allowance  int32 // maxRetriesPerSecond; 0: none
	counted    bool
}

func (f simFigures) payload() *policyconfig.Budget {
	b := &policyconfig.Budget{Name: "payments", UID: f.uid, Generation: f.generation, RetryPercent: f.percent,
		Window: policyconfig.Duration(f.window), MaxTokens: f.tokens, MinRetriesPerSecond: f.floor, Partitions: f.partitions}
	if f.allowance > 0 {
		b.MaxRetriesPerSecond = &f.allowance
	}
	return b
}

func (f simFigures) config() Config { return ConfigOf(f.payload(), "") }

// toy is RG-LOAD's fleet budget: 20 retries/s for the fleet, a floor as
// large, at most 20 pods declared.
var toy = simFigures{uid: "uid-1", generation: 1, percent: 20, window: 10 * time.Second, tokens: 20, floor: 20,
	partitions: 20, allowance: 20, counted: true}

type simScenario struct {
	name    string
	figures simFigures
	// recreated, when set, replaces the budget at recreateAt: deleted and
	// created again under the same name.
	recreated  *simFigures
	recreateAt time.Duration
	initial    int           // pod objects at the start
	added      int           // pod objects created from addAt on, one a second
	addAt      time.Duration //
	startNow   bool          // processes start with their objects (a restart of every process together)
	stopAt     time.Duration // the controller stops (0: it never does)
	relabel    int           // pods relabelled out of the selector at relabelAt, still calling
	relabelAt  time.Duration //
	greedy     bool          // every primary deposits, then asks for retries until refused
	// cutOff initial pods hear no payload from cutAt on: their watch is
	// broken, and they keep the count they last heard.
	cutOff int
	cutAt  time.Duration
	// lag is the most a payload takes to reach a pod; oldLag that for the
	// initial pods (a scale-up whose old pods hear last).
	lag, oldLag time.Duration
	// oldMounted says the initial pods read payloads through a mounted
	// volume: their source states the kubelet's delay (simMountedDelivery).
	oldMounted bool
	length     time.Duration
	// tail is the mean retries/s the new rules must still grant over the
	// last 30 s: the budget holds, it does not starve the fleet.
	tail float64
	// perProcess: the budget is each pod's own, not the fleet's; the
	// fleet's promises are not asked of it.
	perProcess bool
}

// simRuntime is one pod's process: its own registry and, once a payload
// has arrived, its budget.
type simRuntime struct {
	reg *Registry
	b   *Budget
}

func (r *simRuntime) resolve(p *policyconfig.Budget) { r.b, _ = r.reg.Resolve("shop", p) }

type simDelivery struct {
	at      time.Time
	payload *policyconfig.Budget
	// With the members in shards: a count event (count set, payload its
	// budget's figures) or a shard event (shard set).
	count *policyconfig.Count
	shard *policyconfig.MemberShard
}

type simPod struct {
	uid              string
	created, started time.Time
	relabelled       bool
	runtime          *simRuntime // nil until the process starts
	inbox            []simDelivery
	old              bool
	// What the pod holds with the members in shards: the last count (and
	// its budget's figures) and its own shard.
	figures *policyconfig.Budget
	count   *policyconfig.Count
	shard   *policyconfig.MemberShard
}

// joined is the budget a pod with the members in shards enforces: the
// figures it holds, with its count and own shard joined.
func (p *simPod) joined() *policyconfig.Budget {
	if p.figures == nil {
		return nil
	}
	b := *p.figures
	if b.Counted && p.count != nil && p.count.UID == b.UID {
		c := p.count.WithShards(p.shard).Consumers
		b.Consumers = &c
	}
	return &b
}

// receive applies one delivery to the pod's runtime.
func (p *simPod) receive(d simDelivery) {
	switch {
	case d.count != nil:
		p.figures, p.count = d.payload, d.count
	case d.shard != nil:
		p.shard = d.shard
	default:
		p.runtime.resolve(d.payload)
		return
	}
	if b := p.joined(); b != nil {
		p.runtime.resolve(b)
	}
}

// simResult is a run: retries and primaries in each second.
type simResult struct {
	retries, primaries []int
}

func (r simResult) max() int { return slices.Max(r.retries) }

func meanOf(v []int) float64 {
	sum := 0
	for _, x := range v {
		sum += x
	}
	return float64(sum) / float64(max(len(v), 1))
}

// simulate runs sc step by step on one virtual clock. sharded publishes as
// the controller does now: the count without members, spaced 2 ms a pod,
// and the members in shards, removals before the count and additions after
// it, each pod receiving the count and its own shard apart, each after its
// own lag; otherwise the count carries its members, as before the shards.
func simulate(sc simScenario, seed uint64, sharded bool) simResult {
	rng := rand.New(rand.NewPCG(seed, 3))
	quiet := slog.New(slog.DiscardHandler)
	t0 := time.Date(2026, 9, 15, 12, 0, 0, 0, time.UTC)
	clk := clock.NewFake(t0)
	var pods []*simPod
	create := func(at time.Time, old bool) {
		// A process starts 0.2–8 s after its pod object exists (scheduling,
		// image, init), at any point in a second.
		delay := 200*time.Millisecond + time.Duration(rng.Int64N(int64(7800*time.Millisecond)))
		if sc.startNow {
			delay = 0
		}
		pods = append(pods, &simPod{uid: fmt.Sprintf("pod-%d", len(pods)), created: at, started: at.Add(delay), old: old})
	}
	for range sc.initial {
		create(t0, true)
	}
	seconds := int(sc.length / time.Second)
	result := simResult{retries: make([]int, seconds), primaries: make([]int, seconds)}
	// published is the controller's latest payload; members the pods it
	// named, to republish on a change.
	var published *policyconfig.Budget
	var lastPublished time.Time
	var members []string
	// With the members in shards: the controller's generation, its
	// latest count and its shards as published.
	var generation int64
	var latest *policyconfig.Count
	shards := map[string]*policyconfig.MemberShard{}
	next := 0 // the pod the next primary goes to
	for clk.Now().Before(t0.Add(sc.length)) {
		now := clk.Now()
		elapsed := now.Sub(t0)
		if sc.added > 0 && elapsed >= sc.addAt && elapsed < sc.addAt+time.Duration(sc.added)*time.Second && elapsed%time.Second == 0 {
			create(now, false)
		}
		if sc.relabel > 0 && elapsed == sc.relabelAt {
			for _, p := range pods[len(pods)-sc.relabel:] {
				p.relabelled = true
			}
		}
		figures := sc.figures
		if sc.recreated != nil && elapsed >= sc.recreateAt {
			figures = *sc.recreated
		}
		if sc.stopAt == 0 || elapsed < sc.stopAt {
			seen := []string{}
			for _, p := range pods {
				visible := !p.created.After(now.Add(-simCacheLag))
				relabelled := p.relabelled && elapsed >= sc.relabelAt+simCacheLag
				if visible && !relabelled {
					seen = append(seen, p.uid)
				}
			}
			b := figures.payload()
			lagOf := func(i int, p *simPod) (time.Duration, bool) {
				if i < sc.cutOff && elapsed >= sc.cutAt {
					return 0, false
				}
				lag := sc.lag
				if p.old && sc.oldLag > 0 {
					lag = sc.oldLag
				}
				if lag > 0 {
					lag = lag/2 + time.Duration(rng.Int64N(int64(lag/2)))
				}
				return lag, true
			}
			send := func(d simDelivery, to func(*simPod) bool) {
				for i, p := range pods {
					if lag, ok := lagOf(i, p); ok && to(p) {
						d.at = now.Add(lag)
						p.inbox = append(p.inbox, d)
						slices.SortStableFunc(p.inbox, func(x, y simDelivery) int { return x.at.Compare(y.at) })
					}
				}
			}
			changed := published == nil || published.UID != b.UID || !slices.Equal(seen, members)
			due := now.Sub(lastPublished) >= policyconfig.ConsumerCountRefresh
			switch {
			case !sharded && (changed || due):
				if figures.counted {
					b.Consumers = &policyconfig.Consumers{Count: int32(len(seen)), ObservedAt: now, Members: policyconfig.EncodeMembers(seen)}
				}
				published, lastPublished, members = b, now, seen
				send(simDelivery{payload: b}, func(*simPod) bool { return true })
			case sharded:
				spaced := published != nil && published.UID == b.UID &&
					now.Sub(lastPublished) < min(time.Duration(max(len(seen), len(members)))*2*time.Millisecond, policyconfig.ConsumerCountRefresh)
				if published != nil && published.UID != b.UID {
					shards = map[string]*policyconfig.MemberShard{} // a new budget: its own shards
				}
				desired := policyconfig.ShardMembers(policyconfig.EncodeMembers(seen))
				write := func(shard, m string, g int64) {
					sh := &policyconfig.MemberShard{SchemaVersion: policyconfig.MembersSchemaVersion, Namespace: "shop", Budget: b.Name,
						UID: b.UID, Shard: shard, Generation: g, Members: m}
					shards[shard] = sh
					send(simDelivery{shard: sh}, func(p *simPod) bool { return policyconfig.ShardOf(p.uid) == shard })
				}
				// Removals at once, keeping each shard's generation.
				for shard, sh := range shards {
					if keep := policyconfig.IntersectMembers(sh.Members, desired[shard]); keep != sh.Members {
						write(shard, keep, sh.Generation)
					}
				}
				if (!changed && !due) || (changed && spaced) {
					break
				}
				if changed {
					generation++
				}
				published, lastPublished, members = b, now, seen
				count := &policyconfig.Count{SchemaVersion: policyconfig.CountSchemaVersion, Namespace: "shop", Budget: b.Name, UID: b.UID,
					MembersGeneration: generation, Consumers: policyconfig.Consumers{Count: int32(len(seen)), ObservedAt: now}}
				if !figures.counted {
					count = nil
				}
				latest = count
				b.Counted = figures.counted
				send(simDelivery{payload: b, count: count}, func(*simPod) bool { return true })
				for shard, m := range desired {
					if sh := shards[shard]; sh == nil || sh.Members != m {
						write(shard, m, generation)
					}
				}
			}
		}
		// Processes that start now list the current payload; running ones
		// read what has reached them.
		var live []*simPod
		for _, p := range pods {
			if !p.started.After(now) && p.runtime == nil {
				p.inbox = nil
				delivery := time.Duration(0)
				if p.old && sc.oldMounted {
					delivery = simMountedDelivery
				}
				p.runtime = &simRuntime{reg: NewRegistry(clk, WithPod(p.uid), WithDelivery(delivery), WithLogger(quiet))}
				switch {
				case published != nil && sharded:
					p.figures, p.count, p.shard = published, latest, shards[policyconfig.ShardOf(p.uid)]
					p.runtime.resolve(p.joined())
				case published != nil:
					p.runtime.resolve(published)
				}
			}
			if p.runtime == nil {
				continue
			}
			live = append(live, p)
			for len(p.inbox) > 0 && !p.inbox[0].at.After(now) {
				p.receive(p.inbox[0])
				p.inbox = p.inbox[1:]
			}
		}
		sec := int(elapsed / time.Second)
		if len(live) > 0 {
			p := live[next%len(live)]
			next++
			if b := p.runtime.b; b != nil { // no payload yet: no budget, no retry
				b.Primary()
				result.primaries[sec]++
				if sc.greedy {
					b.Success()
				}
				for attempt := 2; attempt <= simAttempts && b.TryRetry() == Allowed; attempt++ {
					result.retries[sec]++
				}
			}
		}
		clk.Advance(simStep)
	}
	return result
}

// violations lists where r breaks the budget's promises: a second above a
// fleet budget's maxRetriesPerSecond (RG-LOAD's allowance), or a 60 s window above
// retryPercent of its primaries once it holds Credit real primaries
// (INV-RTY-04). Before a recreation settles, the allowance is the larger
// of the two budgets'.
func violations(sc simScenario, r simResult) (seconds, windows []string) {
	settled := sc.recreateAt + policyconfig.ConsumerCountDelivery + 2*time.Second
	for s, v := range r.retries {
		allowance := sc.figures.allowance
		if sc.recreated != nil && time.Duration(s)*time.Second >= settled {
			allowance = sc.recreated.allowance
		} else if sc.recreated != nil {
			allowance = max(allowance, sc.recreated.allowance)
		}
		if sc.figures.counted && allowance > 0 && v > int(allowance) {
			seconds = append(seconds, fmt.Sprintf("second %d: %d retries > %d", s, v, allowance))
		}
	}
	credit := credit(Config{RetryPercent: sc.figures.percent, MaxTokens: sc.figures.tokens, Partitions: 1})
	percent := sc.figures.percent
	if sc.recreated != nil {
		percent = max(percent, sc.recreated.percent)
	}
	for end := 1; end <= len(r.retries); end++ {
		from := max(0, end-60)
		p, n := 0, 0
		for s := from; s < end; s++ {
			p += r.primaries[s]
			n += r.retries[s]
		}
		if int64(p) >= credit && n*100 > int(percent)*p {
			windows = append(windows, fmt.Sprintf("seconds [%d, %d): %d retries > %d%% of %d primaries", from, end, n, percent, p))
		}
	}
	return seconds, windows
}

// scaleUpWithDeliverySpread is issue 19's "shares change before every pod
// hears of it": processes that start with their pod objects, and the
// informer's spread, with the 2 old pods last to hear,
// 1–2 s late (up to the delivery bound), and the new pods 10–20 ms late. A
// growing share waits the delivery bound, so no new pod takes its share
// while the old pods still hold the previous count's.
var scaleUpWithDeliverySpread = simScenario{
	name:    "scale-up 2 → 20, the old pods hearing each payload up to the delivery bound late (partitions 20)",
	figures: toy, initial: 2, added: 18, addAt: 60 * time.Second, startNow: true, lag: 20 * time.Millisecond,
	oldLag: policyconfig.ConsumerCountDelivery - time.Millisecond, length: 200 * time.Second, tail: 18,
}

// TestFleetBudgetSimulation runs each scenario of issue 19's findings: the
// budget holds the allowance in every second and retryPercent in every 60 s
// window, and still grants the fleet its tail.
func TestFleetBudgetSimulation(t *testing.T) {
	partitionsDefault := toy
	partitionsDefault.partitions = 1
	perProcess := toy
	perProcess.partitions, perProcess.counted = 1, false
	old := toy
	old.uid, old.generation, old.allowance, old.floor, old.percent = "uid-old", 5, 40, 40, 40
	recreated := toy
	recreated.uid = "uid-new"
	scenarios := []simScenario{
		{name: "steady: 20 pods", figures: toy, initial: 20, length: 180 * time.Second, tail: 18},
		// Per-process budgets: each pod allows the whole 20/s, so the fleet
		// makes 400/s; what fleet budgets exist for.
		{name: "per-process budgets: 20 pods, 20/s each", figures: perProcess, initial: 20, length: 120 * time.Second, tail: 380,
			perProcess: true},
		{name: "a greedy cold start: 1 pod, 10% of 100/s", figures: simFigures{uid: "u", generation: 1, percent: 10, window: time.Minute,
			tokens: 10, partitions: 1}, initial: 1, startNow: true, greedy: true, length: 180 * time.Second, tail: 9.5},
		{name: "20 pods restarting together, 10 tokens over 20 partitions", figures: simFigures{uid: "u", generation: 1, percent: 10,
			window: time.Minute, tokens: 10, partitions: 20}, initial: 20, startNow: true, length: 90 * time.Second},
		// Once the last count is stale, no pod holds a share: fewer
		// retries, never more, until the controller counts again.
		{name: "the controller down at 30 s, the last count 4, the fleet grown to 20 at 40 s (partitions 1)", figures: partitionsDefault,
			initial: 4, added: 16, addAt: 40 * time.Second, stopAt: 30 * time.Second, length: 240 * time.Second},
		{name: "a count of 0, the controller down at 10 s, then 20 pods (partitions 1)", figures: partitionsDefault,
			added: 20, addAt: 20 * time.Second, stopAt: 10 * time.Second, length: 180 * time.Second},
		scaleUpWithDeliverySpread,
		{name: "scale-up 2 → 20 at 80 s, old pod 0's watch broken from 10 s, its count stale from 70 s (partitions 1)",
			figures: partitionsDefault, initial: 2, added: 18, addAt: 80 * time.Second, cutOff: 1, cutAt: 10 * time.Second,
			lag: 200 * time.Millisecond, length: 200 * time.Second, tail: 17},
		{name: "scale-up 2 → 20, the 2 old pods reading a mounted volume 30–60 s late (partitions 20)", figures: toy, initial: 2,
			added: 18, addAt: 60 * time.Second, lag: 200 * time.Millisecond, oldLag: time.Minute, oldMounted: true,
			length: 200 * time.Second, tail: 16.5},
		{name: "10 pods, 9 relabelled out of the selector at 60 s (partitions 1)", figures: partitionsDefault, initial: 10,
			relabel: 9, relabelAt: 60 * time.Second, lag: time.Second, length: 180 * time.Second, tail: 18},
		{name: "a budget of 40/s at generation 5 recreated at 60 s as 20/s, generation 1", figures: old, recreated: &recreated,
			recreateAt: 60 * time.Second, initial: 20, lag: time.Second, length: 180 * time.Second, tail: 18},
		{name: "8 pods: 20/8 rounds down to 2 each", figures: toy, initial: 8, length: 120 * time.Second, tail: 15.5},
		{name: "30 pods, above the allowance per second", figures: toy, initial: 30, length: 120 * time.Second},
	}
	var table strings.Builder
	fmt.Fprintf(&table, "%-100s %-22s %6s %7s %7s %6s %6s\n", "scenario (seed 0)", "members", "max/s", "mean/s", "tail/s", "sec>A", "win>%")
	for _, sc := range scenarios {
		for _, sharded := range []bool{false, true} {
			mode := "in the count (before)"
			if sharded {
				mode = "in shards (now)"
			}
			for seed := range uint64(simSeeds) {
				res := simulate(sc, seed, sharded)
				name := fmt.Sprintf("%s, members %s, seed %d", sc.name, mode, seed)
				seconds, windows := violations(sc, res)
				if !sc.perProcess {
					for _, v := range append(seconds, windows...) {
						t.Errorf("%s: %s", name, v)
					}
				}
				tail := meanOf(res.retries[len(res.retries)-30:])
				if tail < sc.tail {
					t.Errorf("%s: a mean of %.1f retries/s over the last 30 s, want at least %.1f: the budget starves the fleet", name, tail, sc.tail)
				}
				if seed == 0 {
					fmt.Fprintf(&table, "%-100s %-22s %6d %7.1f %7.1f %6d %6d\n", sc.name, mode, res.max(), meanOf(res.retries), tail,
						len(seconds), len(windows))
				}
			}
		}
	}
	t.Logf("retries/s per scenario (virtual seconds; sec>A: seconds above the allowance; win>%%: 60 s windows above retryPercent):\n%s", table.String())
}
