package retry

import (
	"context"
	"testing"
	"time"
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
