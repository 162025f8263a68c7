package v1alpha1

import (
	"fmt"
	"regexp"
	"time"
)

// DurationPattern is the syntax of a Duration: one or more decimal numbers,
// each with a unit, as Go's time.ParseDuration reads them but without a sign,
// so a negative span, a bare "0" and ".5s" are refused. The CEL rule on the
// Duration type spells the same pattern; the CRD's cross-field rules repeat it
// only as a guard, because the API server evaluates them even when the
// field's own rule has failed, and duration() of a malformed string would be
// an evaluation error rather than ERR_INVALID_DURATION. A test reads the
// generated CRD and keeps every copy equal to this constant.
const DurationPattern = `^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$`

// durationMessage is the text of ERR_INVALID_DURATION, in CEL and in Go.
const durationMessage = "must be a duration such as 100ms, 4s or 1m (digits, then ns, us, ms, s, m or h)"

var durationSyntax = regexp.MustCompile(DurationPattern)

// Duration is a span of time written as a string, for example 100ms, 4s or
// 1m30s. Its syntax is declared once, here, rather than on every field
// (the approach of Gateway API's GEP-2257). It is a string so that clients
// see exactly what was written; Parse turns it into a time.Duration.
// +kubebuilder:validation:MaxLength=32
// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$')",message="ERR_INVALID_DURATION: must be a duration such as 100ms, 4s or 1m (digits, then ns, us, ms, s, m or h)"
type Duration string

// DurationOf writes d as a Duration, the way time.Duration.String does.
// A negative d has no Duration form; it is written as 0s.
func DurationOf(d time.Duration) Duration {
	return Duration(max(d, 0).String())
}

// Parse returns the span, or an error when the string is not a Duration:
// the same strings the CRD refuses with ERR_INVALID_DURATION.
func (d Duration) Parse() (time.Duration, error) {
	if !durationSyntax.MatchString(string(d)) {
		return 0, fmt.Errorf("%q %s", string(d), durationMessage)
	}
	v, err := time.ParseDuration(string(d))
	if err != nil {
		return 0, fmt.Errorf("%q: %w", string(d), err)
	}
	return v, nil
}

// Valid reports whether Parse succeeds.
func (d Duration) Valid() bool {
	_, err := d.Parse()
	return err == nil
}

// Duration is the span, or 0 when the string is not a Duration. Callers that
// hold an object the API server admitted may use it directly; others check
// Valid first (the validators report a malformed one with ERR_INVALID_DURATION).
func (d Duration) Duration() time.Duration {
	v, _ := d.Parse()
	return v
}
