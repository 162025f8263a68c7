// Package httprules holds the HTTP facts Retryguard's rules rest on: which
// methods RFC 9110 makes idempotent, which statuses may be retried, which
// fallback endpoints are safe. The CRD's CEL, the Go validators, the payload
// parser and the runtime all judge by these, so they cannot drift apart. It
// imports only the standard library and package limits.
package httprules

import (
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/retryguard/retryguard/contract/limits"
)

// IdempotentMethodPattern is the expression the CRD's CEL rule uses;
// IsIdempotentMethod judges the same set (a test holds them together).
const IdempotentMethodPattern = `^(GET|HEAD|PUT|DELETE|OPTIONS|TRACE)( |$)`

// IsIdempotentMethod reports whether RFC 9110 defines method as idempotent.
// Methods are case-sensitive: "put" is not PUT.
func IsIdempotentMethod(method string) bool {
	switch method {
	case "GET", "HEAD", "PUT", "DELETE", "OPTIONS", "TRACE":
		return true
	}
	return false
}

// IsIdempotentOperation reports whether an operation such as "PUT /v1/x"
// starts with a method that RFC 9110 defines as idempotent.
func IsIdempotentOperation(operation string) bool {
	method, _, _ := strings.Cut(operation, " ")
	return IsIdempotentMethod(method)
}

// IsRetryableStatus reports whether an HTTP status may be retried at all:
// 429, or a 5xx other than 501 and 505.
func IsRetryableStatus(code int32) bool {
	return code == 429 || (code >= 500 && code <= 599 && code != 501 && code != 505)
}

// IsSecureEndpoint reports whether endpoint is an absolute https URL with a
// host, judged exactly as the CRD's CEL isURL/url() functions judge it.
func IsSecureEndpoint(endpoint string) bool {
	if _, err := url.ParseRequestURI(endpoint); err != nil {
		return false
	}
	u, err := url.Parse(endpoint)
	return err == nil && u.Scheme == "https" && u.Host != ""
}

// The idempotency key template rules. The CRD's CEL rules use these very
// expressions; the admission parity tests hold the two together.
const (
	// KeyTemplateWellFormedPattern: literal text and {name} placeholders, with
	// every brace paired.
	KeyTemplateWellFormedPattern = `^([^{}]|[{][A-Za-z_][A-Za-z0-9_]*[}])*$`
	// KeyTemplatePlaceholderPattern matches one {name} placeholder.
	KeyTemplatePlaceholderPattern = `[{][A-Za-z_][A-Za-z0-9_]*[}]`
	// PerAttemptPlaceholderPattern matches a placeholder whose value changes
	// from one attempt to the next, so that retries would carry new keys.
	PerAttemptPlaceholderPattern = `(?i)[{](attempt|random|uuid|now|timestamp)[}]`
	// HeaderTokenPattern is an RFC 9110 field name (a token): no spaces, no
	// CR or LF, nothing that could split or inject a header.
	HeaderTokenPattern = `^[A-Za-z0-9!#$%&'*+.^_|~-]+$`
)

var (
	keyTemplateWellFormed  = regexp.MustCompile(KeyTemplateWellFormedPattern)
	keyTemplatePlaceholder = regexp.MustCompile(KeyTemplatePlaceholderPattern)
	perAttemptPlaceholder  = regexp.MustCompile(PerAttemptPlaceholderPattern)
	headerToken            = regexp.MustCompile(HeaderTokenPattern)
)

// KeyTemplateProblem says what is wrong with an idempotency key template:
// KeyTemplateOK, or the first rule it breaks.
type KeyTemplateProblem int

const (
	// KeyTemplateOK: the template renders one stable key per operation.
	KeyTemplateOK KeyTemplateProblem = iota
	// KeyTemplateMalformed: an unpaired brace or a placeholder that is not {name}.
	KeyTemplateMalformed
	// KeyTemplateConstant: no placeholder, so every operation shares one key.
	KeyTemplateConstant
	// KeyTemplatePerAttempt: a per-attempt placeholder such as {attempt}.
	KeyTemplatePerAttempt
)

// KeyTemplateProblems lists every rule template breaks, in the order above;
// nil when it is a good template.
func KeyTemplateProblems(template string) []KeyTemplateProblem {
	var out []KeyTemplateProblem
	if !keyTemplateWellFormed.MatchString(template) {
		out = append(out, KeyTemplateMalformed)
	}
	if !keyTemplatePlaceholder.MatchString(template) {
		out = append(out, KeyTemplateConstant)
	}
	if perAttemptPlaceholder.MatchString(template) {
		out = append(out, KeyTemplatePerAttempt)
	}
	return out
}

// KeyTemplatePlaceholders returns the names a template's placeholders use,
// in order, repeats included.
func KeyTemplatePlaceholders(template string) []string {
	var out []string
	for _, m := range keyTemplatePlaceholder.FindAllString(template, -1) {
		out = append(out, m[1:len(m)-1])
	}
	return out
}

// IsHeaderToken reports whether name is a valid HTTP field name.
func IsHeaderToken(name string) bool { return headerToken.MatchString(name) }

// IsReplaySafe reports whether repeating an operation is safe: it carries an
// idempotency key, or its method is idempotent.
func IsReplaySafe(operation string, hasKeyTemplate bool) bool {
	return hasKeyTemplate || IsIdempotentOperation(operation)
}

// retriesOnlyUndispatched reports whether a policy retries nothing but
// failures that prove the request never left (limits.PreDispatchErrors):
// no status, since a status means the dependency received the request, and
// only pre-dispatch transport errors.
func retriesOnlyUndispatched[E ~string](statusCodes []int32, errors []E) bool {
	return len(statusCodes) == 0 && !slices.ContainsFunc(errors, func(e E) bool {
		return !slices.Contains(limits.PreDispatchErrors, string(e))
	})
}

// MayRetry reports whether a policy may make more than one attempt: its
// operation is safe to replay, or it retries only failures that prove the
// request never left, which need no replay safety (RG-RETRY: "proven
// non-dispatch ... can permit another attempt even without a server
// retryability flag"). A 429 still needs replay safety (RG-LOAD).
func MayRetry[E ~string](operation string, hasKeyTemplate bool, statusCodes []int32, errors []E) bool {
	return IsReplaySafe(operation, hasKeyTemplate) || retriesOnlyUndispatched(statusCodes, errors)
}
