package v1alpha1_test

import (
	"testing"
	"time"

	"k8s.io/utils/ptr"

	v1 "github.com/retryguard/retryguard/api/v1alpha1"
)

// An absent retryAfter.maxDelay is 3s, or deadline − minRemaining when the
// deadline is too short for 3s: never a default the rules would refuse.
func TestRetryAfterMaxDelayIsDerived(t *testing.T) {
	for _, tc := range []struct {
		deadline, minRemaining, written string
		want                            time.Duration
	}{
		{deadline: "4s", want: 3 * time.Second},
		{deadline: "3s", want: 2500 * time.Millisecond},
		{deadline: "2s", minRemaining: "1s", want: time.Second},
		{deadline: "400ms", want: 0},
		{deadline: "3s", written: "1s", want: time.Second},
	} {
		s := v1.RetryPolicySpec{Deadline: v1.DurationOf(mustParse(tc.deadline))}
		if tc.minRemaining != "" {
			s.MinRemaining = ptr.To(v1.DurationOf(mustParse(tc.minRemaining)))
		}
		if tc.written != "" {
			s.RetryAfter = &v1.RetryAfter{MaxDelay: ptr.To(v1.DurationOf(mustParse(tc.written)))}
		}
		if got := s.RetryAfterMaxDelay(); got != tc.want {
			t.Errorf("%+v: %v, want %v", tc, got, tc.want)
		}
		d := s.WithDefaults()
		if got := d.RetryAfterMaxDelay(); got != tc.want {
			t.Errorf("%+v after defaulting: %v, want %v", tc, got, tc.want)
		}
	}
}

func mustParse(s string) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		panic(err)
	}
	return d
}

// A layer that names no hidden attempts hides none: defaulting makes the
// factor 1, so a policy written before the field existed keeps its product.
func TestHiddenAttemptsDefaultsToOne(t *testing.T) {
	s := v1.RetryPolicySpec{}
	d := s.WithDefaults()
	if d.Layer.HiddenAttempts == nil || *d.Layer.HiddenAttempts != v1.DefaultHiddenAttempts || v1.DefaultHiddenAttempts != 1 {
		t.Fatalf("hiddenAttempts after defaulting = %v, want 1", d.Layer.HiddenAttempts)
	}
	if s.Layer.HiddenAttempts != nil {
		t.Fatal("WithDefaults changed its receiver")
	}
}
