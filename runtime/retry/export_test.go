package retry

// The pure rule and the random source are internal: Do is what an app calls.
// The external tests (decide_test.go, spec_test.go) hold them under the
// names they had.
var (
	Decide   = decide
	WithRand = withRand
)

type (
	DecisionInput = decisionInput
	Decision      = decision
)
