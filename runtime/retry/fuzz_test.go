package retry

import (
	"strings"
	"testing"

	"github.com/retryguard/retryguard/contract/limits"
)

// Retry-After comes from the dependency: any bytes must give a delay in
// [0, maxRetryAfter] or "unparseable", never a panic or a negative wait.
func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"0", "3", "-5", "+5", "1.5", "soon", "", "   ", "99999999999999999999999",
		epoch.Format("Mon, 02 Jan 2006 15:04:05 GMT"), "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		d, ok := parseRetryAfter(v, epoch)
		if ok && (d < 0 || d > maxRetryAfter) {
			t.Fatalf("%q: %v", v, d)
		}
		if !ok && d != 0 {
			t.Fatalf("%q: unparseable but %v", v, d)
		}
		if digits := strings.TrimSpace(v); digits != "" && strings.Trim(digits, "0123456789") == "" && !ok {
			t.Fatalf("%q: delta-seconds did not parse", v)
		}
	})
}

// A key template and the caller's values: compiling never panics, and a
// rendered key is at most limits.MaxIdempotencyKeyLength bytes of printable ASCII.
func FuzzRenderKey(f *testing.F) {
	f.Add("SMS-2FA-{user_id}-{login_session_id}", "42", "s-9")
	f.Add("{user_id}", strings.Repeat("x", 300), "")
	f.Add("K-{a{b}", "1", "2")
	f.Add("{}", "\r\n", "é")
	f.Fuzz(func(t *testing.T, tmpl, user, session string) {
		k, err := compileKey(tmpl)
		if err != nil {
			return
		}
		key, err := k.render(Vars{"user_id": user, "login_session_id": session})
		if err != nil {
			return
		}
		if len(key) > limits.MaxIdempotencyKeyLength {
			t.Fatalf("%q rendered %d bytes", tmpl, len(key))
		}
		for i := range len(key) {
			if key[i] < 0x20 || key[i] > 0x7e {
				t.Fatalf("%q rendered byte %#x", tmpl, key[i])
			}
		}
	})
}
