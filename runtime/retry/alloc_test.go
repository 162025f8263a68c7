package retry

import (
	"context"
	"testing"
	"time"

	"github.com/retryguard/retryguard/runtime/watch"
)

// readPolicy is the success path's policy: three attempts of an idempotent GET
// with a budget, and no key template (a template costs one allocation per
// operation: the rendered key).
func readPolicy() (*Executor, string) {
	p := smsPolicy()
	p.Policy.Name, p.Policy.Operation, p.Policy.KeyTemplate = "ledger-read", "GET /v1/balance", ""
	return New(staticSource{p.Policy.Name: p}), p.Policy.Name
}

// The caller's request context already carries a deadline sooner than the
// policy's, as a server's does: Do then needs no timer of its own.
func requestContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), time.Second)
}

func ok(context.Context, Attempt) error { return nil }

// The success path of Do allocates nothing.
func TestDoSuccessPathAllocatesNothing(t *testing.T) {
	ex, name := readPolicy()
	ctx, cancel := requestContext()
	defer cancel()
	if allocs := testing.AllocsPerRun(1000, func() { _ = ex.Do(ctx, name, nil, ok) }); allocs != 0 {
		t.Fatalf("Do's success path allocates %.1f times per operation", allocs)
	}
}

// A Source that reports its changes spares the success path its lookup,
// never a change: the next Do after a Set or a Delete runs under what the
// Source then holds (here each payload's key template).
func TestTheNextDoRunsUnderTheSourcesChange(t *testing.T) {
	src := watch.NewManual()
	p := smsPolicy()
	name := p.Policy.Name
	src.Set(name, p)
	ex := New(src)
	key := func() string {
		var got string
		_ = ex.Do(context.Background(), name, Vars{"user_id": "42", "login_session_id": "s-9"}, func(_ context.Context, a Attempt) error {
			got = a.Key
			return nil
		})
		return got
	}
	if k := key(); k != "SMS-2FA-42-s-9" {
		t.Fatalf("the published template: key %q", k)
	}
	q := smsPolicy()
	q.Policy.KeyTemplate = "SMS-{user_id}"
	src.Set(name, q)
	if k := key(); k != "SMS-42" {
		t.Fatalf("after a Set: key %q, want the new template's", k)
	}
	src.Delete(name)
	if k := key(); k != "" {
		t.Fatalf("after a Delete: key %q, want none (one attempt, fail closed)", k)
	}
	src.Set(name, p)
	if k := key(); k != "SMS-2FA-42-s-9" {
		t.Fatalf("published again: key %q", k)
	}
}
