package main

import "fmt"

// Exit codes: the plugin's contract with CI. Each is defined here once, and
// docs/kubectl-plugin.md#exit-codes lists them (TestExitCodesAreDocumented
// holds the table to these constants). A run that meets several conditions
// exits with the first that applies in this order: usage, unreadable,
// failed, refused, warnings.
const (
	// exitOK: done, and nothing refused or failed.
	exitOK = 0
	// exitRefused: lint found a document the API server would refuse, test
	// an expectation that failed, or check a check that does not pass.
	exitRefused = 1
	// exitUsage: the command line is wrong (an unknown command or flag, a
	// missing argument, a value out of range).
	exitUsage = 2
	// exitWarnings: lint --warnings-as-errors admitted every document, and
	// the admission answered at least one with a warning.
	exitWarnings = 3
	// exitUnreadable: the input could not be read: a path or standard
	// input, a test file, the kubeconfig, the cluster (unreachable, forbidden, or the
	// named object not found), a journal or a topic.
	exitUnreadable = 4
	// exitFailed: something else failed, after the input was read: writing
	// a reconciliation, the JUnit report, or the output.
	exitFailed = 5
)

// exitCodes names each code for its documentation.
var exitCodes = map[int]string{
	exitOK:         "exitOK",
	exitRefused:    "exitRefused",
	exitUsage:      "exitUsage",
	exitWarnings:   "exitWarnings",
	exitUnreadable: "exitUnreadable",
	exitFailed:     "exitFailed",
}

// exitError ends a command with code, after printing msg (when not empty)
// on standard error.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// exitf returns an exitError with a formatted message.
func exitf(code int, format string, a ...any) error {
	return &exitError{code: code, msg: fmt.Sprintf(format, a...)}
}

// exitWith ends a command with code and no message of its own.
func exitWith(code int) error { return &exitError{code: code} }
