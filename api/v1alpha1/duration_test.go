package v1alpha1_test

import (
	"regexp"
	"testing"
	"time"

	v1 "github.com/retryguard/retryguard/api/v1alpha1"
)

func TestDurationRefusesWhatTheCRDRefuses(t *testing.T) {
	for s, valid := range map[string]bool{
		"100ms": true, "4s": true, "1m30s": true, "1.5s": true, "2h0m0s": true, "3µs": true, "0s": true,
		"-1s": false, "0": false, ".5s": false, "soon": false, "": false, "1 s": false, "+1s": false, "1d": false,
	} {
		if got := v1.Duration(s).Valid(); got != valid {
			t.Errorf("Duration(%q).Valid() = %v, want %v", s, got, valid)
		}
	}
}

// Any string: Parse never panics, accepts only DurationPattern, agrees with
// time.ParseDuration, never yields a negative span; DurationOf round-trips.
func FuzzDurationParse(f *testing.F) {
	for _, s := range []string{"100ms", "1m30s", "-1s", "0", ".5s", "soon", "1.5h", "9999999999h"} {
		f.Add(s)
	}
	pattern := regexp.MustCompile(v1.DurationPattern)
	f.Fuzz(func(t *testing.T, s string) {
		d, err := v1.Duration(s).Parse()
		if err != nil {
			return
		}
		if !pattern.MatchString(s) {
			t.Fatalf("%q parsed although it is not a Duration", s)
		}
		if want, _ := time.ParseDuration(s); d != want || d < 0 {
			t.Fatalf("%q parsed as %v, time.ParseDuration says %v", s, d, want)
		}
		if back, err := v1.DurationOf(d).Parse(); err != nil || back != d {
			t.Fatalf("DurationOf(%v) = %q does not round-trip: %v, %v", d, v1.DurationOf(d), back, err)
		}
	})
}
