package conformance_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/retryguard/retryguard/conformance"
	"github.com/retryguard/retryguard/contract/backoff"
	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/runtime/budget"
	"github.com/retryguard/retryguard/runtime/clock"
	"github.com/retryguard/retryguard/runtime/retry"
	"github.com/retryguard/retryguard/runtime/watch"
)

// The Go runtime runs every vector through its public API: what an app
// imports is what the vectors hold to the contract.

func read[T any](t *testing.T, name string) T {
	t.Helper()
	var v T
	if err := conformance.Read(name, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestPayloadVectors(t *testing.T) {
	file := read[conformance.PayloadFileSchema](t, conformance.PayloadFile)
	for _, v := range file.Vectors {
		t.Run(v.Name, func(t *testing.T) {
			raw, err := v.Apply(file.Base)
			if err != nil {
				t.Fatal(err)
			}
			expectParse(t, raw, v.Accept, v.Field)
		})
	}
}

// The admission vectors are generated from the admission table
// (api/v1alpha1's TestConformanceAdmissionVectors keeps the file current):
// a pod is at least as strict as the API server.
func TestAdmissionPayloadVectors(t *testing.T) {
	vectors := read[[]conformance.PayloadVector](t, conformance.AdmissionFile)
	if len(vectors) < 20 {
		t.Fatalf("%d admission vectors: the file lost its cases", len(vectors))
	}
	for _, v := range vectors {
		t.Run(v.Name, func(t *testing.T) { expectParse(t, v.Payload, v.Accept, "") })
	}
}

func expectParse(t *testing.T, raw []byte, accept bool, field string) {
	t.Helper()
	_, err := policyconfig.Parse(raw)
	var pe *policyconfig.ParseError
	switch {
	case accept && err != nil:
		t.Fatalf("refused, want accepted: %v", err)
	case !accept && err == nil:
		t.Fatalf("accepted, want refused:\n%s", raw)
	case err != nil && !errors.As(err, &pe):
		t.Fatalf("not a *ParseError: %v", err)
	case field != "" && pe.Field != field:
		t.Fatalf("refused on %q, want on %q: %v", pe.Field, field, err)
	}
}

func TestDurationVectors(t *testing.T) {
	file := read[conformance.File[conformance.DurationVector]](t, conformance.DurationFile)
	for _, v := range file.Vectors {
		t.Run(v.Text, func(t *testing.T) {
			var d policyconfig.Duration
			q, _ := json.Marshal(v.Text)
			err := json.Unmarshal(q, &d)
			switch {
			case v.Accept && err != nil:
				t.Fatalf("refused: %v", err)
			case !v.Accept && err == nil:
				t.Fatalf("accepted as %v", d.D())
			case v.Accept && int64(d) != v.Nanoseconds:
				t.Fatalf("%dns, want %dns", int64(d), v.Nanoseconds)
			}
		})
	}
}

// keyPayload is the base payload with the vector's template; its budget
// lets the one attempt run.
func keyPayload(t *testing.T, tmpl string) *policyconfig.Payload {
	t.Helper()
	file := read[conformance.PayloadFileSchema](t, conformance.PayloadFile)
	q, _ := json.Marshal(tmpl)
	raw, err := conformance.PayloadPatch{Name: "key", Set: map[string]json.RawMessage{"policy.keyTemplate": q}}.Apply(file.Base)
	if err != nil {
		t.Fatal(err)
	}
	p, err := policyconfig.Parse(raw)
	if err != nil {
		t.Fatalf("template %q: %v", tmpl, err)
	}
	return p
}

func TestKeyVectors(t *testing.T) {
	file := read[conformance.File[conformance.KeyVector]](t, conformance.KeyFile)
	for _, v := range file.Vectors {
		t.Run(v.Name, func(t *testing.T) {
			p := keyPayload(t, v.Template)
			ex := retry.New(watch.NewStatic(p), retry.WithClock(clock.NewVirtual(time.Now())))
			var keys []string
			err := ex.Do(context.Background(), p.Policy.Name, retry.Vars(v.Vars), func(_ context.Context, a retry.Attempt) error {
				keys = append(keys, a.Key)
				if a.Header != p.Policy.IdempotencyHeader {
					t.Errorf("the key goes in %q, want %q", a.Header, p.Policy.IdempotencyHeader)
				}
				return nil
			})
			var re *retry.Error
			switch {
			case v.Code != "" && (!errors.As(err, &re) || string(re.Code) != v.Code):
				t.Fatalf("err %v, want code %s", err, v.Code)
			case v.Code != "" && len(keys) != 0:
				t.Fatalf("%d attempts made, want none before the key renders", len(keys))
			case v.Code == "" && err != nil:
				t.Fatalf("err %v, want key %q", err, v.Key)
			case v.Code == "" && (len(keys) != 1 || keys[0] != v.Key):
				t.Fatalf("keys %q, want [%q]", keys, v.Key)
			}
		})
	}
}

// Every retry of an operation carries the key of its first attempt.
func TestTheKeyIsTheSameOnEveryRetry(t *testing.T) {
	p := keyPayload(t, "SMS-2FA-{user_id}-{login_session_id}")
	p.Budget.Name = "conformance-key-retries" // a budget of its own, full
	ex := retry.New(watch.NewStatic(p), retry.WithClock(clock.NewVirtual(time.Now())))
	var keys []string
	_ = ex.Do(context.Background(), p.Policy.Name, retry.Vars{"user_id": "42", "login_session_id": "s-9"},
		func(_ context.Context, a retry.Attempt) error {
			keys = append(keys, a.Key)
			return retry.Status(503, "")
		})
	if len(keys) != int(p.Policy.MaxAttempts) || strings.Count(strings.Join(keys, ","), "SMS-2FA-42-s-9") != len(keys) {
		t.Fatalf("keys %q, want %d attempts each with SMS-2FA-42-s-9", keys, p.Policy.MaxAttempts)
	}
}

func TestDecideVectors(t *testing.T) {
	file := read[conformance.DecideFileSchema](t, conformance.DecideFile)
	for _, v := range file.Vectors {
		t.Run(v.Name, func(t *testing.T) {
			in := decideInput(t, file.Defaults, v.Input)
			d := retry.Decide(in)
			asked := false
			if d.AskBudget {
				asked = true
				in.BudgetAsked, in.Budget = true, budget.Denial(vectorInput(t, file.Defaults, v.Input).Budget)
				d = retry.Decide(in)
			}
			got := conformance.DecideWant{Next: string(d.Next), Code: string(d.Code), Eligible: d.Eligible, BudgetAsked: asked}
			if d.Retry() {
				got.Sleep = conformance.Duration(d.Sleep)
			}
			if got != v.Want {
				t.Fatalf("decided %+v (%s), want %+v", got, d.Detail, v.Want)
			}
		})
	}
}

// vectorInput merges a vector's input over the defaults, key by key.
func vectorInput(t *testing.T, defaults, input json.RawMessage) conformance.DecideInput {
	t.Helper()
	var merged map[string]json.RawMessage
	if err := json.Unmarshal(defaults, &merged); err != nil {
		t.Fatal(err)
	}
	var over map[string]json.RawMessage
	if err := json.Unmarshal(input, &over); err != nil {
		t.Fatal(err)
	}
	for k, v := range over {
		merged[k] = v
	}
	raw, _ := json.Marshal(merged)
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var in conformance.DecideInput
	if err := dec.Decode(&in); err != nil {
		t.Fatal(err)
	}
	return in
}

func decideInput(t *testing.T, defaults, input json.RawMessage) retry.DecisionInput {
	v := vectorInput(t, defaults, input)
	in := retry.DecisionInput{
		Evidence: retry.Evidence{Class: retry.Class(v.Class), Status: v.Status, Transport: v.Transport, Dispatched: v.Dispatched,
			RetryAfter: v.RetryAfter.D(), RetryAfterUnparseable: v.RetryAfterUnparseable},
		ReplaySafe: v.ReplaySafe, MayHaveApplied: v.MayHaveApplied, Attempt: v.Attempt, MaxAttempts: v.MaxAttempts,
		Remaining: v.Remaining.D(), Wait: v.Wait.D(), PerAttemptTimeout: v.PerAttemptTimeout.D(), MinRemaining: v.MinRemaining.D(),
		RetryAfterMaxDelay: v.RetryAfterMaxDelay.D(),
	}
	if v.NotEnforced {
		in.NotEnforced = "the policy is not in force"
	}
	if v.Unrepeatable {
		in.Unrepeatable = "the request body was not kept"
	}
	return in
}

func TestJitterVectors(t *testing.T) {
	file := read[conformance.File[conformance.JitterVector]](t, conformance.JitterFile)
	for _, v := range file.Vectors {
		t.Run(v.Name, func(t *testing.T) {
			s := backoff.Strategy{Jitter: backoff.Jitter(v.Jitter), Base: v.Base.D(), Cap: v.Cap.D(), Multiplier: v.Multiplier}
			lowest, highest := s, s
			lowest.Rand = func(int64) int64 { return 0 }
			highest.Rand = func(n int64) int64 { return n - 1 }
			if got := lowest.Delay(v.Retry, v.Prev.D()); got != v.Min.D() {
				t.Errorf("lowest draw %v, want %v", got, v.Min.D())
			}
			if got := highest.Delay(v.Retry, v.Prev.D()); got != v.Max.D() {
				t.Errorf("highest draw %v, want %v", got, v.Max.D())
			}
			r := rand.New(rand.NewPCG(1, 2))
			s.Rand = r.Int64N
			for range 1000 {
				if got := s.Delay(v.Retry, v.Prev.D()); got < v.Min.D() || got > v.Max.D() {
					t.Fatalf("drew %v, outside [%v, %v]", got, v.Min.D(), v.Max.D())
				}
			}
		})
	}
}

// start is the clock's zero for budget vectors: a whole multiple of every
// bucket width a vector uses, as the vectors' README asks.
var start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestBudgetVectors(t *testing.T) {
	file := read[conformance.File[conformance.BudgetVector]](t, conformance.BudgetFile)
	for _, v := range file.Vectors {
		t.Run(v.Name, func(t *testing.T) {
			var pb policyconfig.Budget
			dec := json.NewDecoder(bytes.NewReader(v.Budget))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&pb); err != nil {
				t.Fatal(err)
			}
			c := budget.ConfigOf(&pb, "")
			if n := v.Count; n != nil {
				c.Counted, c.Included = true, n.IncludesPod
				c.Consumers = &policyconfig.Consumers{Count: n.Count, ObservedAt: start.Add(n.ObservedAt.D())}
			}
			clk := clock.NewFake(start)
			b := budget.New(c, clk)
			for i, s := range v.Steps {
				clk.Set(start.Add(s.At.D()))
				for p := range s.Primaries {
					b.Primary()
					if p < s.Successes {
						b.Success()
					}
				}
				granted, denial := 0, budget.Allowed
				for range s.Retries {
					d := b.TryRetry()
					if d == budget.Allowed {
						granted++
						continue
					}
					if denial == budget.Allowed {
						denial = d
					}
				}
				if granted != s.Granted || string(denial) != s.Denial {
					t.Fatalf("step %d at %v: granted %d, first denial %q; want %d, %q", i, s.At.D(), granted, denial, s.Granted, s.Denial)
				}
			}
		})
	}
}
