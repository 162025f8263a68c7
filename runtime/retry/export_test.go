package retry

// The random source is internal: an app's jitter is the policy's. The
// external tests (spec_test.go) hold it under the name it had.
var WithRand = withRand
