package budget

// credit is internal: an app never needs a budget's start credit. The
// external tests (share_failures_test.go) hold it under the name they had.
var Credit = credit
