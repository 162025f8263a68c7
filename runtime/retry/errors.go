package retry

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/retryguard/retryguard/contract/codes"
	"github.com/retryguard/retryguard/contract/httprules"
)

// ErrNotCompleted is matched by every *Error: the operation did not complete.
var ErrNotCompleted = errors.New("retryguard: operation not completed")

// Error ends an operation that did not complete. It names the stable code,
// the final lifecycle state, the attempts made and the last evidence.
type Error struct {
	Code     codes.Code
	State    State
	Policy   string
	Key      string
	Attempts int
	// Last is the evidence of the last attempt (zero when none was made).
	Last Evidence
	// Detail explains the decision to a human.
	Detail string
	// Err is the last attempt's error, if it returned one.
	Err error
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("%s: policy %s: %s after %d attempt(s)", e.Code, e.Policy, e.Detail, e.Attempts)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Is matches ErrNotCompleted, and another *Error with the same code.
func (e *Error) Is(target error) bool {
	if target == ErrNotCompleted {
		return true
	}
	o, ok := target.(*Error)
	return ok && o.Code == e.Code && o.State == "" && o.Policy == ""
}

// Unwrap returns the last attempt's error.
func (e *Error) Unwrap() error { return e.Err }

// Sentinel returns an *Error that errors.Is matches against any *Error with
// code c: errors.Is(err, retry.Sentinel(codes.RetryBudgetExhausted)).
func Sentinel(c codes.Code) *Error { return &Error{Code: c} }

// statusOf maps codes to the HTTP status a gateway would answer with.
var statusOf = map[codes.Code]int{
	codes.RetryBudgetExhausted:        http.StatusServiceUnavailable,
	codes.DeadlineExceeded:            http.StatusGatewayTimeout,
	codes.RetryAfterTooLong:           http.StatusServiceUnavailable,
	codes.PermanentFailure:            http.StatusBadGateway,
	codes.UnknownOutcome:              http.StatusAccepted,
	codes.RetryLimitExceeded:          http.StatusBadGateway, // the dependency failed every attempt
	codes.MissingKeyVariable:          http.StatusInternalServerError,
	codes.UntestedCompensationBlocked: http.StatusForbidden,
	codes.SharedFailureDomainLeak:     http.StatusInternalServerError,
}

// Problem renders the error as RFC 9457 problem details.
func (e *Error) Problem() httprules.Problem {
	status, ok := statusOf[e.Code]
	switch {
	case e.State == UnknownOutcome:
		// Whatever stopped it, an operation that may have been applied is
		// not a failure: it is accepted for reconciliation (RG-LOAD).
		status = http.StatusAccepted
	case !ok:
		status = http.StatusBadGateway
	}
	return httprules.Problem{Type: httprules.ProblemType + string(e.Code), Title: string(e.Code), Status: status, Detail: e.Error(), Code: string(e.Code)}
}
