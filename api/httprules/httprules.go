// Package httprules holds the HTTP facts Retryguard's rules rest on: which
// methods RFC 9110 makes idempotent, which statuses may be retried, which
// fallback endpoints are safe. The CRD's CEL, the Go validators, the payload
// parser and the runtime all judge by these, so they cannot drift apart. It
// imports only the standard library.
package httprules

import (
	"net/url"
	"regexp"
)

// IdempotentMethodPattern is the expression the CRD's CEL rule uses.
const IdempotentMethodPattern = `^(GET|HEAD|PUT|DELETE|OPTIONS|TRACE)( |$)`

var idempotentMethod = regexp.MustCompile(IdempotentMethodPattern)

// IsIdempotentOperation reports whether an operation such as "PUT /v1/x"
// starts with a method that RFC 9110 defines as idempotent.
func IsIdempotentOperation(operation string) bool {
	return idempotentMethod.MatchString(operation)
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
