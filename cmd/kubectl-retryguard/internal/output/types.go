package output

import (
	"time"

	"github.com/retryguard/retryguard/runtime/retry"
)

// Durations are Go duration strings ("1.2s", "500ms"), as in the policies'
// own specs. Object references are "namespace/name".

// LintResult is `lint -o json|yaml`: one entry per document, in the order
// admitted, and the counts the text summary line gives.
type LintResult struct {
	TypeMeta  `json:",inline"`
	Summary   LintSummary    `json:"summary"`
	Documents []LintDocument `json:"documents"`
}

// LintSummary counts the documents by verdict, and the warnings.
type LintSummary struct {
	Documents int `json:"documents"`
	Created   int `json:"created"`
	Updated   int `json:"updated"`
	Refused   int `json:"refused"`
	Skipped   int `json:"skipped"`
	Warnings  int `json:"warnings"`
}

// LintDocument is the API server's answer to one document.
type LintDocument struct {
	// File is the path the document came from ("-" for standard input) and
	// Line the line it starts on.
	File string `json:"file"`
	Line int    `json:"line"`
	// APIVersion and Kind are empty for a document that does not parse.
	APIVersion string `json:"apiVersion,omitempty"`
	Kind       string `json:"kind,omitempty"`
	Namespace  string `json:"namespace,omitempty"`
	Name       string `json:"name,omitempty"`
	// Verdict is created, updated, refused or skipped.
	Verdict string `json:"verdict"`
	// Error is the refusal as the API server words it; Causes are its
	// field errors, each with its ERR_ code where it has one.
	Error    string   `json:"error,omitempty"`
	Causes   []Cause  `json:"causes,omitempty"`
	Warnings []string `json:"warnings,omitempty"`
	// Notes are lint's own remarks on what the files alone cannot show.
	Notes []string `json:"notes,omitempty"`
}

// Cause is one field error of a refusal.
type Cause struct {
	Field   string `json:"field"`
	Code    string `json:"code,omitempty"`
	Message string `json:"message"`
}

// Condition is a Ready condition as the controller reported it.
type Condition struct {
	// Status is True, False or Unknown (also when the controller set none).
	Status   string `json:"status"`
	Reason   string `json:"reason,omitempty"`
	Message  string `json:"message,omitempty"`
	Reported bool   `json:"reported"`
	// Stale is set when the condition describes an older generation.
	Stale bool `json:"stale,omitempty"`
}

// LayerGraph is `graph -o json|yaml`: every policy shown, parents before
// their children, each with its product, and the budgets.
type LayerGraph struct {
	TypeMeta        `json:",inline"`
	MaxLeafAttempts int64         `json:"maxLeafAttempts"`
	Policies        []GraphPolicy `json:"policies"`
	// Cycles are parentRef cycles in call order, the first policy repeated
	// at the end.
	Cycles  [][]string    `json:"cycles,omitempty"`
	Budgets []GraphBudget `json:"budgets"`
}

// GraphPolicy is one policy in the forest.
type GraphPolicy struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Parent is the parent in the forest; MissingParent one that parentRef
	// names and that does not exist.
	Parent        string `json:"parent,omitempty"`
	MissingParent string `json:"missingParent,omitempty"`
	// NotPermitted says why the parent does not count this policy, when it
	// does not: its product then starts at itself.
	NotPermitted   string `json:"notPermitted,omitempty"`
	Layer          string `json:"layer"`
	MaxAttempts    int32  `json:"maxAttempts"`
	HiddenAttempts int32  `json:"hiddenAttempts,omitempty"`
	// Product is the attempts from the root down to this policy, and Path
	// the arithmetic that makes it.
	Product   int64     `json:"product"`
	Path      string    `json:"path"`
	OverLimit bool      `json:"overLimit"`
	Budget    string    `json:"budget,omitempty"`
	Ready     Condition `json:"ready"`
}

// GraphBudget is one RetryBudget, or one that policies name and that does
// not exist (Exists false, and no Ready).
type GraphBudget struct {
	Namespace string     `json:"namespace"`
	Name      string     `json:"name"`
	Exists    bool       `json:"exists"`
	UsedBy    []string   `json:"usedBy"`
	Ready     *Condition `json:"ready,omitempty"`
}

// Explanation is `explain -o json|yaml`.
type Explanation struct {
	TypeMeta `json:",inline"`
	Policy   ExplainedPolicy   `json:"policy"`
	InForce  bool              `json:"inForce"`
	Ready    Condition         `json:"ready"`
	Layers   ExplainedLayers   `json:"layers"`
	Schedule ExplainedSchedule `json:"schedule"`
	// Budget is absent for a policy that names none.
	Budget *ExplainedBudget `json:"budget,omitempty"`
}

// ExplainedPolicy identifies the policy.
type ExplainedPolicy struct {
	Namespace      string `json:"namespace"`
	Name           string `json:"name"`
	Layer          string `json:"layer"`
	MaxAttempts    int32  `json:"maxAttempts"`
	HiddenAttempts int32  `json:"hiddenAttempts,omitempty"`
	Service        string `json:"service"`
	Operation      string `json:"operation,omitempty"`
	ConfigMap      string `json:"configMap,omitempty"`
}

// ExplainedLayers is the product through the policy.
type ExplainedLayers struct {
	Path          string   `json:"path"`
	Product       int64    `json:"product"`
	Limit         int64    `json:"limit"`
	Policies      []string `json:"policies"`
	MissingParent string   `json:"missingParent,omitempty"`
	NotPermitted  string   `json:"notPermitted,omitempty"`
	// WorstPath is the worst path from the root down through the policy to
	// its deepest layer, when it has children.
	WorstPath    string   `json:"worstPath,omitempty"`
	WorstProduct int64    `json:"worstProduct,omitempty"`
	Cycle        []string `json:"cycle,omitempty"`
	TooDeep      bool     `json:"tooDeep,omitempty"`
}

// ExplainedSchedule is the webhook's worst-case schedule.
type ExplainedSchedule struct {
	Deadline     string `json:"deadline"`
	MinRemaining string `json:"minRemaining"`
	// PerAttemptTimeout is the policy's perAttemptTimeout (JSON attemptCost); empty when unbounded.
	PerAttemptTimeout string             `json:"attemptCost,omitempty"`
	Jitter            string             `json:"jitter"`
	Attempts          []ScheduledAttempt `json:"attempts"`
	FeasibleAttempts  int32              `json:"feasibleAttempts"`
	Duration          string             `json:"duration"`
	Warning           string             `json:"warning,omitempty"`
}

// ScheduledAttempt is one row of the schedule. Sleeps are absent for the
// first attempt; StartsAt and EndsBy for one that does not run.
type ScheduledAttempt struct {
	Attempt  int32  `json:"attempt"`
	SleepMin string `json:"sleepMin,omitempty"`
	SleepMax string `json:"sleepMax,omitempty"`
	// RemainingBeforeSleep is the deadline left when the retry is decided.
	RemainingBeforeSleep string `json:"remainingBeforeSleep,omitempty"`
	StartsAt             string `json:"startsAt,omitempty"`
	EndsBy               string `json:"endsBy,omitempty"`
	Runs                 bool   `json:"runs"`
}

// ExplainedBudget is the budget the retries draw from.
type ExplainedBudget struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Exists is false when the policy names a budget that does not exist.
	Exists              bool       `json:"exists"`
	RetryPercent        int32      `json:"retryPercent,omitempty"`
	Window              string     `json:"window,omitempty"`
	MaxTokens           int32      `json:"maxTokens,omitempty"`
	MinRetriesPerSecond int32      `json:"minRetriesPerSecond,omitempty"`
	MaxRetriesPerSecond *int32     `json:"maxRetriesPerSecond,omitempty"`
	Partitions          int32      `json:"partitions,omitempty"`
	UsedBy              []string   `json:"usedBy,omitempty"`
	Ready               *Condition `json:"ready,omitempty"`
}

// CheckResult is `check -o json|yaml`: every check in the order run.
type CheckResult struct {
	TypeMeta `json:",inline"`
	Passed   bool `json:"passed"`
	// Unreachable says why the cluster could not be reached; the checks
	// then stop, and none is listed.
	Unreachable string  `json:"unreachable,omitempty"`
	Checks      []Check `json:"checks"`
}

// Check is one check: its name, whether it passed, and what it found.
type Check struct {
	Name    string `json:"name"`
	Passed  bool   `json:"passed"`
	Message string `json:"message"`
	// Hint is what to look at and run, for a check that failed.
	Hint string `json:"hint,omitempty"`
}

// TestResult is `test -o json|yaml`: every test document in the order run,
// each expectation's verdict under it.
type TestResult struct {
	TypeMeta `json:",inline"`
	// Passed is true when every expectation of every test passed.
	Passed  bool        `json:"passed"`
	Summary TestSummary `json:"summary"`
	Tests   []TestCase  `json:"tests"`
}

// TestSummary counts the test documents, and their results by outcome.
type TestSummary struct {
	Tests   int `json:"tests"`
	Results int `json:"results"`
	Passed  int `json:"passed"`
	Failed  int `json:"failed"`
}

// TestCase is one test document of a test file.
type TestCase struct {
	// File is the test file, Name the test's metadata.name.
	File    string            `json:"file"`
	Name    string            `json:"name"`
	Passed  bool              `json:"passed"`
	Results []TestExpectation `json:"results"`
}

// TestExpectation is one expectation held to one document it names, or a
// refusal that no expectation names (Expected then absent).
type TestExpectation struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// File and Line are the manifest document's (File the expectation's
	// own when no document matched).
	File     string       `json:"file,omitempty"`
	Line     int          `json:"line,omitempty"`
	Expected *TestVerdict `json:"expected,omitempty"`
	// Got is absent when no document matched.
	Got    *TestVerdict `json:"got,omitempty"`
	Passed bool         `json:"passed"`
	// Failures say what differs, one per difference.
	Failures []string `json:"failures,omitempty"`
}

// TestVerdict is a verdict (pass, refused, or lint's skipped), the sorted
// ERR_ codes of a refusal, and the warnings.
type TestVerdict struct {
	Verdict  string   `json:"verdict"`
	Codes    []string `json:"codes,omitempty"`
	Warnings []string `json:"warnings,omitempty"`
}

// DeadLetterList is `deadletters list -o json|yaml` (the letters the
// filters keep, in the order read) and `deadletters reconcile -o json|yaml`
// (the letters it marked, with their new reconciliation).
type DeadLetterList struct {
	TypeMeta `json:",inline"`
	Letters  []DeadLetterEntry `json:"letters"`
}

// DeadLetterEntry is one dead letter and its reconciliation, if any; it is
// also one line of `deadletters export`.
type DeadLetterEntry struct {
	// Identity names this letter: its record key, operation number and
	// time (namespace/policy/key#operation@time), as reconcile takes it.
	Identity string `json:"identity"`
	// Letter is the letter as the runtime wrote it (retry.DeadLetter).
	Letter     retry.DeadLetter `json:"letter"`
	Reconciled *Reconciliation  `json:"reconciled,omitempty"`
}

// Reconciliation is an operator's record that a letter's outcome is known
// and dealt with. Identity is the letter's.
type Reconciliation struct {
	Identity string    `json:"identity"`
	At       time.Time `json:"at"`
	By       string    `json:"by,omitempty"`
	Note     string    `json:"note"`
}

// Version is `version -o json|yaml`.
type Version struct {
	TypeMeta `json:",inline"`
	// Module is the plugin's module version from its build information
	// ("(devel)" for a build from a checkout).
	Module string `json:"module"`
	// GoVersion is the toolchain that built it.
	GoVersion string `json:"goVersion"`
	// APIVersion is the CRDs' version the plugin reads and lints.
	PolicyAPIVersion string `json:"policyAPIVersion"`
	// PayloadVersion is the version of the published ConfigMap payload
	// (contract/policyconfig) the plugin and its runtime speak.
	PayloadVersion string `json:"payloadVersion"`
}
