package proxy

import (
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/retryguard/retryguard/contract/policyconfig"
)

// hedged makes a payload hedge once after 20 ms.
func hedged(p *policyconfig.Payload) {
	p.Policy.Hedging = &policyconfig.Hedging{Delay: policyconfig.Duration(20 * time.Millisecond), MaxHedges: 1}
}

// slowFirst answers after stall, or records its cancellation in cancelled.
func slowFirst(stall time.Duration, cancelled chan<- struct{}) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
			close(cancelled)
		case <-time.After(stall):
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, `{"id":"slow"}`)
		}
	}
}

// The sidecar forwards through the RoundTripper, so a replay-safe request
// (a POST with the policy's key) is hedged: the dependency receives the
// same Idempotency-Key twice, the application gets the hedge's answer
// without waiting for the slow one, and the slow attempt is cancelled.
func TestTheSidecarHedgesAKeyedPost(t *testing.T) {
	cancelled := make(chan struct{})
	u := newUpstream(t, slowFirst(3*time.Second, cancelled))
	h := newHarness(t, u, smsPayload(hedged))
	start := time.Now()
	res, body := h.send(t, http.MethodPost, "/v1/messages", smsVars, `{"to":"+15550100"}`)
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("took %s: the slow answer was waited for", took)
	}
	if res.StatusCode != http.StatusCreated || body != `{"id":"m-1"}` || res.Header.Get("X-Vendor") != "ok" {
		t.Fatalf("got %d %q (X-Vendor %q), want the hedge's 201 {\"id\":\"m-1\"}", res.StatusCode, body, res.Header.Get("X-Vendor"))
	}
	select {
	case <-cancelled:
	case <-time.After(2 * time.Second):
		t.Fatal("the slow attempt was not cancelled")
	}
	seen := u.requests()
	if len(seen) != 2 || seen[0].Key == "" || seen[0].Key != seen[1].Key {
		t.Fatalf("the dependency received %d requests (%+v), want one key twice", len(seen), seen)
	}
	if seen[0].Body != `{"to":"+15550100"}` || seen[1].Body != seen[0].Body {
		t.Fatalf("bodies %q and %q, want the request's twice", seen[0].Body, seen[1].Body)
	}
}

// A POST without a key is never hedged, even under a hedging policy: the
// dependency receives it once, and the application waits for its answer.
func TestTheSidecarDoesNotHedgeAKeylessPost(t *testing.T) {
	u := newUpstream(t, slowFirst(200*time.Millisecond, make(chan struct{})))
	h := newHarness(t, u, smsPayload(hedged, func(p *policyconfig.Payload) { p.Policy.KeyTemplate = "" }))
	res, body := h.send(t, http.MethodPost, "/v1/messages", nil, `{"to":"+15550100"}`)
	if res.StatusCode != http.StatusCreated || body != `{"id":"slow"}` {
		t.Fatalf("got %d %q, want the one attempt's 201 {\"id\":\"slow\"}", res.StatusCode, body)
	}
	if seen := u.requests(); len(seen) != 1 {
		t.Fatalf("the dependency received %d requests, want 1: a keyless POST is not hedged", len(seen))
	}
}
