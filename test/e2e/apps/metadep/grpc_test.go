package main

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/retryguard/retryguard/hack/drills/fleet/depseries"
	"github.com/retryguard/retryguard/test/e2e/internal/depgrpc"
)

// bothAPIs is one dependency with cfg served over HTTP and gRPC on
// loopback: its URL, a gRPC client of it, and the model itself.
func bothAPIs(t *testing.T, cfg config) (string, *grpc.ClientConn, *dep) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	d := startDep(ctx, cfg)
	srv := httptest.NewServer(d.handler())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := d.grpcServer()
	go func() { _ = gs.Serve(lis) }()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDisableRetry())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close(); gs.Stop(); srv.Close(); cancel() })
	return srv.URL, cc, d
}

// work calls Work with key ("" for none) and returns the status's code.
func work(t *testing.T, cc *grpc.ClientConn, key string, opts ...grpc.CallOption) codes.Code {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if key != "" {
		ctx = depgrpc.WithKey(ctx, key)
	}
	return grpcstatus.Code(depgrpc.Work(ctx, cc, opts...))
}

// TestGRPCCountsInTheHTTPSeries: calls over gRPC are counted as HTTP's are,
// in the same series (a key first sent over gRPC is a retry over HTTP), and
// each trigger's answer is the gRPC status runtime/grpc reads as HTTP's:
// UNAVAILABLE for 503, RESOURCE_EXHAUSTED with the pushback for 429.
func TestGRPCCountsInTheHTTPSeries(t *testing.T) {
	cfg := defaults
	cfg.Workers, cfg.Service, cfg.SlowBy = 2, 10*time.Millisecond, 300*time.Millisecond
	url, cc, _ := bothAPIs(t, cfg)
	for _, key := range []string{"a", "a", "b", ""} {
		if got := work(t, cc, key); got != codes.OK {
			t.Fatalf("key %q: %v, want OK", key, got)
		}
	}
	if got := status(t, url, "a"); got != http.StatusCreated {
		t.Fatalf("key a over HTTP: %d, want 201", got)
	}
	trigger(t, url, depseries.Outage, "1h")
	if got := work(t, cc, "c"); got != codes.Unavailable {
		t.Fatalf("during the outage: %v, want Unavailable", got)
	}
	var s depseries.Series
	getJSON(t, url+"/series", &s)
	if got, want := total(s), (depseries.Second{Received: 6, First: 4, Retry: 2, Applied: 5, Duplicates: 2, Outage: 1}); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}

	url, cc, _ = bothAPIs(t, cfg)
	trigger(t, url, depseries.Throttle, "200ms")
	var trailer metadata.MD
	if got := work(t, cc, "d", grpc.Trailer(&trailer)); got != codes.ResourceExhausted {
		t.Errorf("throttled: %v, want ResourceExhausted", got)
	}
	if got := trailer.Get(pushbackTrailer); len(got) != 1 || got[0] != "1000" {
		t.Errorf("throttled: %s %q, want [1000] (Retry-After: 1)", pushbackTrailer, got)
	}
	triggerOff(t, url)
	// The slow trigger's answer comes after the client's deadline; the
	// client sees DEADLINE_EXCEEDED, and the work is applied all the same.
	trigger(t, url, depseries.Slow, "1h")
	ctx, cancel := context.WithTimeout(depgrpc.WithKey(context.Background(), "e"), 100*time.Millisecond)
	defer cancel()
	if err := depgrpc.Work(ctx, cc); grpcstatus.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("during the latency spike: %v, want DeadlineExceeded", err)
	}
	if got, want := total(onceApplied(t, url)), (depseries.Second{Received: 2, First: 2, Applied: 1, Throttled: 1}); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

// TestGRPCQueuedAnswers: a queued call is answered with its job's status:
// OK once applied, UNAVAILABLE when it waited past DropAfter; a call that
// finds the queue full is shed with UNAVAILABLE at once.
func TestGRPCQueuedAnswers(t *testing.T) {
	cfg := defaults
	cfg.Workers, cfg.Service, cfg.QueueLimit, cfg.DropAfter = 1, 300*time.Millisecond, 1, 50*time.Millisecond
	url, cc, d := bothAPIs(t, cfg)
	busy, stale := make(chan codes.Code, 1), make(chan codes.Code, 1)
	received := func() int {
		var s depseries.Series
		getJSON(t, url+"/series", &s)
		return total(s).Received
	}
	go func() { busy <- work(t, cc, "busy") }()
	for received() != 1 || d.depth() != 0 { // the worker took it
		time.Sleep(time.Millisecond)
	}
	go func() { stale <- work(t, cc, "stale") }()
	for d.depth() != 1 {
		time.Sleep(time.Millisecond)
	}
	if got := work(t, cc, "shed"); got != codes.Unavailable {
		t.Errorf("with the queue full: %v, want Unavailable", got)
	}
	if got := <-busy; got != codes.OK {
		t.Errorf("the worker's call: %v, want OK", got)
	}
	if got := <-stale; got != codes.Unavailable {
		t.Errorf("a call that waited past DropAfter: %v, want Unavailable", got)
	}
	var s depseries.Series
	getJSON(t, url+"/series", &s)
	if got, want := total(s), (depseries.Second{Received: 3, First: 3, Applied: 1, Shed: 1, Stale: 1}); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
}
