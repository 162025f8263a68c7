package v1alpha1

import (
	"cmp"
	"slices"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/retryguard/retryguard/contract/codes"
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
