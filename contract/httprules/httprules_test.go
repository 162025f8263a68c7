package httprules_test

import (
	"regexp"
	"slices"
	"testing"

	"github.com/retryguard/retryguard/contract/httprules"
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
		// The CRD's CEL rule judges by the pattern: the two must agree.
		if got := regexp.MustCompile(httprules.IdempotentMethodPattern).MatchString(op); got != want {
			t.Errorf("IdempotentMethodPattern on %q = %v, want %v", op, got, want)
		}
	}
}

// Issue 18, item 6: a policy that retries only failures proving the request
// never left may retry a non-idempotent operation without a key; a status,
// or a transport error after which the request may have been applied, needs
// replay safety.
func TestMayRetry(t *testing.T) {
	for name, tc := range map[string]struct {
		op     string
		key    bool
		status []int32
		errors []string
		want   bool
	}{
		"keyed POST":                          {"POST /v1/messages", true, []int32{429, 503}, []string{"Timeout"}, true},
		"PUT":                                 {"PUT /v1/x", false, []int32{503}, []string{"ConnectionReset"}, true},
		"POST, refused and DNS only":          {"POST /v1/messages", false, nil, []string{"ConnectionRefused", "DNSFailure"}, true},
		"POST, nothing retried":               {"POST /v1/messages", false, []int32{}, nil, true},
		"POST, refused and a 429":             {"POST /v1/messages", false, []int32{429}, []string{"ConnectionRefused"}, false},
		"POST, refused and a reset":           {"POST /v1/messages", false, nil, []string{"ConnectionRefused", "ConnectionReset"}, false},
		"POST, a timeout":                     {"POST /v1/messages", false, nil, []string{"Timeout"}, false},
		"no operation, DNS only":              {"", false, nil, []string{"DNSFailure"}, true},
		"no operation, an unknown error name": {"", false, nil, []string{"Refused"}, false},
	} {
		if got := httprules.MayRetry(tc.op, tc.key, tc.status, tc.errors); got != tc.want {
			t.Errorf("%s: MayRetry = %v, want %v", name, got, tc.want)
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
