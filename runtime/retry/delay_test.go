package retry

import (
	"testing"
	"time"
)

// A protocol that states its server delay as a duration (gRPC's
// grpc-retry-pushback-ms) reaches Decide as Retry-After does; a negative one
// is a server's "do not retry" (gRPC A6), terminal as an unparseable
// Retry-After is (MC-FM-01).
func TestStatusErrorDelay(t *testing.T) {
	listed := func(int) bool { return true }
	none := func(string) bool { return false }
	now := time.Unix(0, 0)
	cases := []struct {
		err        *StatusError
		after      time.Duration
		unparsable bool
	}{
		{&StatusError{Code: 429, Delay: 250 * time.Millisecond}, 250 * time.Millisecond, false},
		{&StatusError{Code: 429, Delay: -1}, 0, true},
		{&StatusError{Code: 429, RetryAfter: "2", Delay: time.Millisecond}, 2 * time.Second, false}, // the header wins
		{&StatusError{Code: 503}, 0, false},
	}
	for _, c := range cases {
		ev := classify(c.err, listed, none, now)
		if ev.RetryAfter != c.after || ev.RetryAfterUnparseable != c.unparsable {
			t.Errorf("%+v: RetryAfter %s unparseable %v, want %s %v", *c.err, ev.RetryAfter, ev.RetryAfterUnparseable, c.after, c.unparsable)
		}
	}
}
