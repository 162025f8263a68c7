package v1alpha1

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/retryguard/retryguard/runtime/codes"
)

// Invalid is field.Invalid carrying its code as a value. The detail starts
// with the code, as the CRD's CEL messages do, so that a user reads the same
// text from CEL and from the webhooks; the code itself travels in Origin,
// where CodeOf reads it back without parsing prose.
func Invalid(fldPath *field.Path, value any, code codes.Code, text string) *field.Error {
	return field.Invalid(fldPath, value, code.Message(text)).WithOrigin(string(code))
}

// CodeOf returns the code a field error built by Invalid carries, or "" when
// it carries none (a field.NotSupported, for example).
func CodeOf(e *field.Error) codes.Code {
	return codes.Code(e.Origin)
}

// SortErrors orders errs by field path, then code, then detail, in place, and
// returns them: an object refused twice is refused with the same list.
func SortErrors(errs field.ErrorList) field.ErrorList {
	slices.SortStableFunc(errs, func(a, b *field.Error) int {
		return cmp.Or(
			cmp.Compare(a.Field, b.Field),
			cmp.Compare(CodeOf(a), CodeOf(b)),
			cmp.Compare(a.Detail, b.Detail),
		)
	})
	return errs
}

// outOfRange is the detail of a value outside [lo, hi]. The bounds are passed
// in from package limits, their one home, so that no message restates one
// (internal/layout's TestValidationMessagesFormatTheLimits holds it).
func outOfRange(name string, lo, hi any) string {
	return name + " must be " + between(lo, hi)
}

// between says "between lo and hi", a duration in the short form a user
// writes (1h, not 1h0m0s).
func between(lo, hi any) string {
	return "between " + formatBound(lo) + " and " + formatBound(hi)
}

func formatBound(v any) string {
	d, ok := v.(time.Duration)
	if !ok {
		return fmt.Sprint(v)
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
