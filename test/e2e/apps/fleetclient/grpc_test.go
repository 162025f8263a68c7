package main

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/retryguard/retryguard/contract/codes"
	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/runtime/clock"
	"github.com/retryguard/retryguard/runtime/retry"
	"github.com/retryguard/retryguard/runtime/watch"
	"github.com/retryguard/retryguard/test/e2e/internal/depgrpc"
)

// connectorPayload is drill-connector's rules (testdata/fleet-drill.yaml)
// for the gRPC method, with a 200 ms per-attempt timeout and no reserve
// (minRemaining) to keep the tests fast, and a budget of its own: the
// drill's is counted and allows 15 retries a second shared by the fleet,
// which would refuse a lone test process its first retries. Built from the
// YAML by controllers.BuildPayload it would need those three changed.
const connectorPayload = `{
  "schemaVersion": "policy.retryguard.io/payload/v1",
  "policy": {
    "namespace": "drill-east", "name": "drill-connector", "generation": 1,
    "service": "metadep", "operation": "` + depgrpc.FullMethod + `", "layer": "connector",
    "maxAttempts": 3, "leafAttempts": 3,
    "backoff": {"jitter": "Full", "base": "100ms", "cap": "3s", "multiplier": 2},
    "deadline": "4s", "minRemaining": "0s", "perAttemptTimeout": "200ms", "retryAfterMaxDelay": "3s",
    "retryOnStatusCodes": [429, 503], "retryOnErrors": [],
    "idempotencyHeader": "Idempotency-Key", "keyTemplate": "DRILL-{pod}-{op}",
    "budgetRef": "drill-dependency", "criticality": "Critical"
  },
  "budget": {"name": "drill-dependency", "generation": 1, "retryPercent": 10, "window": "1m0s",
             "maxTokens": 100, "partitions": 1},
  "enforcement": {"mode": "Enforced"}
}`

// fakeDep is a gRPC dependency on loopback whose every call is answered
// by answer(n), n counting from 1; it records each call's key. clock is
// the executor's.
type fakeDep struct {
	clock *clock.Virtual
	mu    sync.Mutex
	keys  []string
}

func (f *fakeDep) attempts() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.keys...)
}

func serveFake(t *testing.T, answer func(ctx context.Context, n int) error) (*fakeDep, *grpcDep) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// The virtual clock makes the backoff instant; attempt timeouts are real.
	f := &fakeDep{clock: clock.NewVirtual(time.Now())}
	s := grpc.NewServer()
	depgrpc.Register(s, func(ctx context.Context, key string) error {
		f.mu.Lock()
		f.keys = append(f.keys, key)
		n := len(f.keys)
		f.mu.Unlock()
		return answer(ctx, n)
	})
	go func() { _ = s.Serve(lis) }()
	p, err := policyconfig.Parse([]byte(connectorPayload))
	if err != nil {
		t.Fatal(err)
	}
	ex := retry.New(watch.NewStatic(p), retry.WithClock(f.clock))
	g, err := newGRPCDep(lis.Addr().String(), ex, "drill-connector")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.close(); err != nil {
			t.Error(err)
		}
		s.Stop()
	})
	return f, g
}

var errUnavailable = status.Error(grpccodes.Unavailable, "draining")

// sameKey fails unless every attempt carried want.
func sameKey(t *testing.T, keys []string, want string) {
	t.Helper()
	for i, k := range keys {
		if k != want {
			t.Errorf("attempt %d: key %q, want %q on every attempt", i+1, k, want)
		}
	}
}

func TestGRPCRetryguardRetriesUnavailableWithOneKey(t *testing.T) {
	f, g := serveFake(t, func(_ context.Context, n int) error {
		if n <= 2 {
			return errUnavailable
		}
		return nil
	})
	ok, code, detail, unknown := g.retryguard("pod-1", "r-1-7")
	if !ok || code != "" || detail != "" || unknown {
		t.Errorf("got ok=%t code=%q detail=%q unknown=%t, want a success on the third attempt", ok, code, detail, unknown)
	}
	keys := f.attempts()
	if len(keys) != 3 {
		t.Errorf("%d attempts, want 3", len(keys))
	}
	sameKey(t, keys, "DRILL-pod-1-r-1-7")
}

func TestGRPCRetryguardGivesUpOnUnavailableForever(t *testing.T) {
	f, g := serveFake(t, func(context.Context, int) error { return errUnavailable })
	ok, code, detail, unknown := g.retryguard("pod-1", "r-1-8")
	t.Logf("detail: %s", detail)
	if ok || code != string(codes.RetryLimitExceeded) || unknown || !strings.Contains(detail, "after 3 attempt(s)") {
		t.Errorf("got ok=%t code=%q detail=%q unknown=%t, want %s after 3 attempts, known", ok, code, detail, unknown, codes.RetryLimitExceeded)
	}
	if keys := f.attempts(); len(keys) > 3 {
		t.Errorf("%d attempts, want at most the policy's 3", len(keys))
	} else {
		sameKey(t, keys, "DRILL-pod-1-r-1-8")
	}
}

// A throttled call's pushback (metadep's Retry-After: 1) is the wait before
// the retry: above what full jitter from a 100 ms base would draw.
func TestGRPCRetryguardWaitsForThePushback(t *testing.T) {
	f, g := serveFake(t, func(ctx context.Context, n int) error {
		if n > 1 {
			return nil
		}
		if err := grpc.SetTrailer(ctx, metadata.Pairs("grpc-retry-pushback-ms", "1000")); err != nil {
			return err
		}
		return status.Error(grpccodes.ResourceExhausted, "throttled")
	})
	before := f.clock.Now()
	ok, code, detail, unknown := g.retryguard("pod-1", "r-1-11")
	if !ok || unknown {
		t.Errorf("got ok=%t code=%q detail=%q unknown=%t, want a success on the second attempt", ok, code, detail, unknown)
	}
	if waited := f.clock.Now().Sub(before); waited < time.Second {
		t.Errorf("waited %v before the retry, want the pushback's 1s", waited)
	}
	if keys := f.attempts(); len(keys) != 2 {
		t.Errorf("%d attempts, want 2", len(keys))
	}
}

// A call that outlives the per-attempt timeout may have been applied: its
// outcome is unknown, never retried blindly (Timeout is not in retryOn).
func TestGRPCRetryguardTimeoutIsAnUnknownOutcome(t *testing.T) {
	f, g := serveFake(t, func(ctx context.Context, _ int) error {
		<-ctx.Done()
		return ctx.Err()
	})
	ok, code, detail, unknown := g.retryguard("pod-1", "r-1-9")
	t.Logf("detail: %s", detail)
	if ok || code != string(codes.UnknownOutcome) || !unknown {
		t.Errorf("got ok=%t code=%q detail=%q unknown=%t, want %s, unknown", ok, code, detail, unknown, codes.UnknownOutcome)
	}
	if keys := f.attempts(); len(keys) != 1 {
		t.Errorf("%d attempts, want 1", len(keys))
	}
}

// A server's permanent status comes back as the server's own, with its code.
func TestGRPCRetryguardPermanentStatusIsTheServers(t *testing.T) {
	_, g := serveFake(t, func(context.Context, int) error { return status.Error(grpccodes.InvalidArgument, "no such work") })
	ok, code, detail, unknown := g.retryguard("pod-1", "r-1-10")
	if ok || code != "InvalidArgument" || detail != "no such work" || unknown {
		t.Errorf("got ok=%t code=%q detail=%q unknown=%t, want the server's InvalidArgument", ok, code, detail, unknown)
	}
}

// naive.Do's delays are real timers: all 27 attempts would wait 5.3 s, so
// the dependency succeeds on the fifth (0.8 s of delays). The first attempt
// hangs: naiveAttemptTimeout must end it, and a timeout that is not the last
// attempt's leaves the outcome known.
func TestGRPCNaiveRetriesEveryFailureWithOneKey(t *testing.T) {
	f, g := serveFake(t, func(ctx context.Context, n int) error {
		switch {
		case n == 1:
			<-ctx.Done()
			return ctx.Err()
		case n < 5:
			return errUnavailable
		}
		return nil
	})
	ok, unknown := g.naive("DRILL-pod-1-r-2-1")
	if !ok || unknown {
		t.Errorf("got ok=%t unknown=%t, want a success", ok, unknown)
	}
	keys := f.attempts()
	if len(keys) != 5 {
		t.Errorf("%d attempts, want 5", len(keys))
	}
	sameKey(t, keys, "DRILL-pod-1-r-2-1")
}

func TestNewGRPCDepWantsAnExecutor(t *testing.T) {
	if g, err := newGRPCDep("127.0.0.1:1", nil, "drill-connector"); err == nil {
		_ = g.close()
		t.Error("newGRPCDep without an executor: no error")
	}
}
