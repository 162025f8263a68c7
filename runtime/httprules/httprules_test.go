package httprules_test

import (
	"slices"
	"testing"

	"github.com/retryguard/retryguard/runtime/httprules"
)

func TestIsSecureEndpoint(t *testing.T) {
	for endpoint, want := range map[string]bool{
		"https://push.internal/v1":    true,
		"HTTPS://push.internal":       true,
		"https://push.internal:8443/": true,
		"http://push.internal":        false,
		"https://":                    false,
		"https:///path":               false,
		"push.internal/v1":            false,
		"":                            false,
		"ftp://push.internal":         false,
	} {
		if got := httprules.IsSecureEndpoint(endpoint); got != want {
			t.Errorf("IsSecureEndpoint(%q) = %v, want %v", endpoint, got, want)
		}
	}
}

func TestIsIdempotentOperation(t *testing.T) {
	for op, want := range map[string]bool{
		"GET": true, "PUT /v1/messages/42": true, "DELETE /x": true, "OPTIONS *": true,
		"POST /v1/messages": false, "PATCH /x": false, "put /x": false, "GETX /x": false, "GET\t/x": false, "": false,
	} {
		if got := httprules.IsIdempotentOperation(op); got != want {
			t.Errorf("IsIdempotentOperation(%q) = %v, want %v", op, got, want)
		}
	}
}

func TestIsRetryableStatus(t *testing.T) {
	for code, want := range map[int32]bool{429: true, 500: true, 503: true, 599: true, 501: false, 505: false, 400: false, 404: false, 302: false, 600: false} {
		if got := httprules.IsRetryableStatus(code); got != want {
			t.Errorf("IsRetryableStatus(%d) = %v, want %v", code, got, want)
		}
	}
}

func TestKeyTemplateProblems(t *testing.T) {
	for tmpl, want := range map[string][]httprules.KeyTemplateProblem{
		"SMS-2FA-{user_id}-{login_session_id}": nil,
		"SMS-{user_id":                         {httprules.KeyTemplateMalformed, httprules.KeyTemplateConstant},
		"SMS-{user_id}}":                       {httprules.KeyTemplateMalformed},
		"{}-{user_id}":                         {httprules.KeyTemplateMalformed},
		"static":                               {httprules.KeyTemplateConstant},
		"{user_id}-{Attempt}":                  {httprules.KeyTemplatePerAttempt},
	} {
		if got := httprules.KeyTemplateProblems(tmpl); !slices.Equal(got, want) {
			t.Errorf("KeyTemplateProblems(%q) = %v, want %v", tmpl, got, want)
		}
	}
	if got := httprules.KeyTemplatePlaceholders("a-{x}-{y_2}-{x}"); !slices.Equal(got, []string{"x", "y_2", "x"}) {
		t.Errorf("placeholders %v", got)
	}
}

func TestIsHeaderToken(t *testing.T) {
	for h, want := range map[string]bool{
		"Idempotency-Key": true, "X-Request-Id": true, "a!#$%&'*+.^_|~-": true,
		"": false, "Idempotency Key": false, "Key\r\nX-Evil: 1": false, "Key:": false, "Ké": false,
	} {
		if got := httprules.IsHeaderToken(h); got != want {
			t.Errorf("IsHeaderToken(%q) = %v, want %v", h, got, want)
		}
	}
}
