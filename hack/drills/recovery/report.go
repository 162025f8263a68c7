package main

import (
	"fmt"
	"math"
	"time"
)

// The spec's pass marks for the recovery drill (MC-RT-01, INV-RTY-04).
const (
	// maxRatio bounds outbound attempts per primary in every 1 s bucket
	// after the first: retries at most 10% of primaries.
	maxRatio = 1.10
	// recoveredBelow is the retry rate (per second) that counts as baseline.
	recoveredBelow = 2
	// maxRecovery is how soon after the fault retries must be under it.
	maxRecovery = 2500 * time.Millisecond
)

// report is report.json.
type report struct {
	Scenario  scenarioReport  `json:"scenario"`
	Policy    policyReport    `json:"policy"`
	Machine   machineReport   `json:"machine"`
	Options   []optionReport  `json:"options"`
	Generator generatorReport `json:"generator"`
	Queue     queueReport     `json:"queue"`
	// OffSchedule says how the machine kept the load from arriving as
	// scheduled ("" when it did not).
	OffSchedule string `json:"offSchedule"`
	// Pass is Option C's verdict, the drill's exit status.
	Pass bool `json:"pass"`
	// Inconclusive: C failed only timing marks while the load was off
	// schedule (exit status 3).
	Inconclusive string `json:"inconclusive"`
}

type scenarioReport struct {
	RPS               int     `json:"rps"`
	FaultSeconds      float64 `json:"faultSeconds"`
	FaultRate         float64 `json:"faultRate"`
	AfterSeconds      float64 `json:"afterSeconds"`
	LatencyMs         float64 `json:"latencyMs"`
	RetryAfterSeconds float64 `json:"retryAfterSeconds"`
	BanLimit          int     `json:"banLimit"`
	BaselineEvery     int     `json:"baselineEvery"`
	Quick             bool    `json:"quick"`
	Broken            string  `json:"broken,omitempty"`
}

type policyReport struct {
	Source      policySource `json:"source"`
	Name        string       `json:"name"`
	Enforcement string       `json:"enforcement"`
	MaxAttempts int32        `json:"maxAttempts"`
	Jitter      string       `json:"jitter"`
	BudgetPct   int32        `json:"budgetRetryPercent"`
	Pool        int32        `json:"poolMaxConnections"`
	Journal     string       `json:"deadLetterJournal"`
}

type machineReport struct {
	CPUs         int    `json:"cpus"`
	GOMAXPROCS   int    `json:"gomaxprocs"`
	Go           string `json:"go"`
	LoadAvgStart string `json:"loadAvgStart"`
	LoadAvgEnd   string `json:"loadAvgEnd"`
}

// generatorReport says how closely the open-loop arrivals kept to their
// schedule: a late arrival is a sign of a busy machine, not of the policy.
type generatorReport struct {
	// MaxLateMs is the latest any operation began against its schedule.
	MaxLateMs float64 `json:"maxLateMs"`
	// LateOver10ms counts operations that began more than 10 ms late.
	LateOver10ms int `json:"lateOver10ms"`
	// Workers is the most workers one option needed.
	Workers int `json:"workers"`
}

type optionReport struct {
	Name    string  `json:"name"`
	Label   string  `json:"label"`
	Series  series  `json:"series"`
	Summary summary `json:"summary"`
	Verdict verdict `json:"verdict"`
}

// series holds one value per second of the drill, by the second the vendor
// saw an attempt in, or the second an operation ended in.
type series struct {
	Primary       []int     `json:"primary"`
	Outbound      []int     `json:"outbound"`
	Retries       []int     `json:"retries"`
	Status429     []int     `json:"status429"`
	Dispatched    []int     `json:"dispatched"`
	BudgetDenials []int     `json:"budgetDenials"`
	DeadLetters   []int     `json:"deadLetters"`
	Failed        []int     `json:"failed"`
	BudgetTokens  []float64 `json:"budgetTokens,omitempty"`
}

type summary struct {
	Offered      int `json:"offered"`
	Dispatched   int `json:"dispatched"`
	DeadLettered int `json:"deadLettered"`
	// DeadLettered: operations that failed and whose dead letter reached the
	// fallback queue. Lost: operations neither dispatched nor in the queue.
	Lost int `json:"lost"`
	// PeakOutbound is the busiest 1 s bucket; PeakWindow the busiest sliding
	// 1 s window at the vendor.
	PeakOutbound int `json:"peakOutbound"`
	PeakWindow   int `json:"peakWindow"`
	// AmplificationDuringFault is attempts per primary during the fault.
	AmplificationDuringFault float64 `json:"amplificationDuringFault"`
	// MaxBucketRatio is the largest outbound/primary of the 1 s buckets
	// after the first, in MaxRatioSecond.
	MaxBucketRatio float64 `json:"maxBucketRatio"`
	MaxRatioSecond int     `json:"maxRatioSecond"`
	// RecoverySeconds is the time from the end of the fault until every
	// later 1 s window holds fewer than 2 retries.
	RecoverySeconds float64 `json:"recoverySeconds"`
	// Bans counts the vendor's ban episodes; FirstBanSeconds is when the
	// first began. RetryBans counts those the retries caused: the window's
	// retries alone were over their share of the contract.
	Bans            int     `json:"bans"`
	FirstBanSeconds float64 `json:"firstBanSeconds,omitempty"`
	RetryBans       int     `json:"retryBans"`
	// PeakRetryWindow is the most retries any sliding 1 s window held.
	PeakRetryWindow int `json:"peakRetryWindow"`
}

type verdict struct {
	Pass     bool     `json:"pass"`
	Failures []string `json:"failures"`
	// Warnings are breaches the retry policy did not cause.
	Warnings []string `json:"warnings"`
	// TimingOnly: every failure is one a stalled machine can cause (a ban,
	// a slow recovery), none an exact count (a lost operation, a ratio).
	TimingOnly bool `json:"timingOnly"`
}

// judge holds a summary to the spec's marks; retryShare is how many retries
// a 1 s window may hold within the contract (the ban limit less the primary
// rate).
func judge(s summary, banLimit, retryShare int) verdict {
	v := verdict{Failures: []string{}, Warnings: []string{}}
	switch {
	case s.RetryBans > 0:
		v.Failures = append(
			v.Failures,
			fmt.Sprintf(
				"vendor ban: %d attempts in one 1 s window (the contract is %d), and up to %d retries in one window (their share is %d); %d ban episodes, the "+
					"first at %.1f s",
				s.PeakWindow,
				banLimit,
				s.PeakRetryWindow,
				retryShare,
				s.Bans,
				s.FirstBanSeconds,
			),
		)
	case s.Bans > 0:
		v.Warnings = append(
			v.Warnings,
			fmt.Sprintf(
				"the vendor saw %d attempts in one 1 s window at %.1f s (the contract is %d) while retries stayed within their share (at most %d of %d): "+
					"primaries bunched, as a load generator does when it catches up after the machine stalled it",
				s.PeakWindow,
				s.FirstBanSeconds,
				banLimit,
				s.PeakRetryWindow,
				retryShare,
			),
		)
	}
	timed := len(v.Failures)
	if s.RecoverySeconds > maxRecovery.Seconds() {
		v.Failures = append(v.Failures, fmt.Sprintf("retries fell under %d/s %.1f s after recovery, later than %.1f s",
			recoveredBelow, s.RecoverySeconds, maxRecovery.Seconds()))
		timed++
	}
	if s.MaxBucketRatio > maxRatio {
		v.Failures = append(v.Failures, fmt.Sprintf("outbound/primary %.2f in second %d, above %.2f", s.MaxBucketRatio, s.MaxRatioSecond, maxRatio))
	}
	if s.Lost > 0 {
		v.Failures = append(v.Failures, fmt.Sprintf("%d of %d operations lost: neither dispatched nor delivered to the fallback queue", s.Lost, s.Offered))
	}
	v.Pass = len(v.Failures) == 0
	v.TimingOnly = !v.Pass && timed == len(v.Failures)
	return v
}

// Thresholds past which the load did not arrive as scheduled.
const (
	maxLateArrival = 100 * time.Millisecond
	maxPrimarySkew = 0.10
)

// offSchedule says why the offered load did not reach the vendors as
// scheduled ("" when it did): the generator's arrivals ran late, or a
// vendor saw a whole second of load stray from rps. Either means the
// machine stalled the drill, and a timing verdict is not the policy's.
func offSchedule(primaries [][]int, rps, loadSeconds int, maxLateMs float64) string {
	if maxLateMs > float64(maxLateArrival/time.Millisecond) {
		return fmt.Sprintf("arrivals ran up to %.0f ms late (the bound is %v)", maxLateMs, maxLateArrival)
	}
	worst, at, val := 0.0, 0, 0
	for _, p := range primaries {
		for i := 1; i < min(loadSeconds, len(p)); i++ {
			if skew := math.Abs(float64(p[i])/float64(rps) - 1); skew > worst {
				worst, at, val = skew, i, p[i]
			}
		}
	}
	if worst > maxPrimarySkew {
		return fmt.Sprintf("a vendor saw %d primaries in second %d, not %d±%.0f%%", val, at, rps, maxPrimarySkew*100)
	}
	return ""
}

// recoveryLag is how long after fault every 1 s window starting later holds
// fewer than recoveredBelow retries; retries are arrival times, sorted, all
// at or after fault.
func recoveryLag(retries []time.Duration, fault time.Duration) time.Duration {
	var lag time.Duration
	for i := 0; i+recoveredBelow-1 < len(retries); i++ {
		if retries[i+recoveredBelow-1]-retries[i] < time.Second {
			lag = retries[i] - fault // a window starting at retries[i] holds recoveredBelow
		}
	}
	return lag
}

// bucketRatio is the largest outbound/primary over the buckets from the
// second to the last whole second of offered load.
func bucketRatio(primary, outbound []int, loadSeconds int) (float64, int) {
	var worst float64
	at := 0
	for i := 1; i < min(loadSeconds, len(primary)); i++ {
		if primary[i] == 0 {
			continue
		}
		if r := float64(outbound[i]) / float64(primary[i]); r > worst {
			worst, at = r, i
		}
	}
	return worst, at
}
