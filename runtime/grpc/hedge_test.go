package retrygrpc_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/runtime/clock"
	retrygrpc "github.com/retryguard/retryguard/runtime/grpc"
	"github.com/retryguard/retryguard/runtime/retry"
	"github.com/retryguard/retryguard/runtime/watch"
)

// hedging is the gRPC policy hedging once after 20 ms, with a budget of its
// own.
func hedging(t *testing.T) *policyconfig.Payload {
	p := grpcPolicy(func(p *policyconfig.Policy) {
		p.MaxAttempts = 2
		p.Hedging = &policyconfig.Hedging{Delay: policyconfig.Duration(20 * time.Millisecond), MaxHedges: 1}
		p.MinRemaining = policyconfig.Duration(10 * time.Millisecond)
	})
	p.Budget.Name, p.Policy.Budget = "hedge-"+t.Name(), "hedge-"+t.Name()
	return p
}

// slowFirst is a health server whose first call waits slow (or its
// cancellation) and answers NOT_SERVING; every later call answers SERVING at
// once. Each answer's header names its call.
type slowFirst struct {
	healthpb.UnimplementedHealthServer
	cancelled chan struct{}
	slow      time.Duration // how long the first call takes

	mu   sync.Mutex
	keys []string
}

func (s *slowFirst) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	s.mu.Lock()
	s.keys = append(s.keys, strings.Join(md.Get("idempotency-key"), ","))
	n := len(s.keys)
	s.mu.Unlock()
	_ = grpc.SetHeader(ctx, metadata.Pairs("call", strconv.Itoa(n)))
	_ = grpc.SetTrailer(ctx, metadata.Pairs("served-by", strconv.Itoa(n)))
	if n == 1 {
		select {
		case <-ctx.Done():
			close(s.cancelled)
			return nil, ctx.Err()
		case <-time.After(s.slow):
		}
		return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_NOT_SERVING}, nil
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

func (s *slowFirst) seen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.keys...)
}

func serveSlowFirst(t *testing.T, slow time.Duration) (*slowFirst, string) {
	s := &slowFirst{cancelled: make(chan struct{}), slow: slow}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, s)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return s, lis.Addr().String()
}

// A slow first answer is hedged: the hedge carries the same key, the caller
// gets the hedge's reply, header and trailer intact (never the slow
// attempt's), and the slow call is cancelled on the server.
func TestUnaryHedgeWinsAndCancelsTheSlowCall(t *testing.T) {
	s, addr := serveSlowFirst(t, 3*time.Second)
	p := hedging(t)
	ic := retrygrpc.New(retry.New(watch.NewStatic(p), retry.WithClock(clock.Real{})), p.Policy.Name)
	var header, trailer metadata.MD
	reply := &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVICE_UNKNOWN}
	start := time.Now()
	cc := connOf(t, addr, ic)
	if err := cc.Invoke(context.Background(), checkMethod, &healthpb.HealthCheckRequest{}, reply,
		retrygrpc.WithVars(smsVars), grpc.Header(&header), grpc.Trailer(&trailer)); err != nil {
		t.Fatalf("the hedge should have won: %v", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("took %s: the slow answer was waited for", took)
	}
	if reply.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("reply %v, want the hedge's SERVING", reply.Status)
	}
	if got := header.Get("call"); len(got) != 1 || got[0] != "2" {
		t.Errorf("header call=%q, want the hedge's 2", got)
	}
	if got := trailer.Get("served-by"); len(got) != 1 || got[0] != "2" {
		t.Errorf("trailer served-by=%q, want the hedge's 2", got)
	}
	select {
	case <-s.cancelled:
	case <-time.After(2 * time.Second):
		t.Fatal("the slow call was not cancelled")
	}
	if keys := s.seen(); len(keys) != 2 || keys[0] != smsKey || keys[1] != smsKey {
		t.Fatalf("the server saw keys %q, want %q twice", keys, smsKey)
	}
}

// A hedge the budget refuses is not sent: the call waits for its one
// attempt, and gets that attempt's reply.
func TestUnaryHedgeRefusedByTheBudgetIsNotSent(t *testing.T) {
	s, addr := serveSlowFirst(t, 200*time.Millisecond)
	p := hedging(t)
	zero := int32(0)
	p.Budget.MaxRetriesPerSecond = &zero // no retry, so no hedge
	ic := retrygrpc.New(retry.New(watch.NewStatic(p), retry.WithClock(clock.Real{})), p.Policy.Name)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	reply := &healthpb.HealthCheckResponse{}
	if err := connOf(t, addr, ic).Invoke(ctx, checkMethod, &healthpb.HealthCheckRequest{}, reply, retrygrpc.WithVars(smsVars)); err != nil {
		t.Fatal(err)
	}
	if keys := s.seen(); len(keys) != 1 {
		t.Fatalf("the server saw %d calls, want 1: a refused hedge must not be sent", len(keys))
	}
	if reply.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("reply %v, want the one attempt's NOT_SERVING", reply.Status)
	}
}

// connOf is a channel to addr built with ic's DialOptions: Invoke lets the
// test hand the interceptor a reply message of its own.
func connOf(t *testing.T, addr string, ic *retrygrpc.Interceptor) *grpc.ClientConn {
	conn, err := grpc.NewClient("passthrough:///"+addr, append(ic.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// A policy without a key may hedge an idempotent HTTP operation, but a gRPC
// call is a POST: without the key, no hedge is sent beside the attempt in
// flight, and the call gets that attempt's reply.
func TestUnaryKeylessCallIsNotHedged(t *testing.T) {
	s, addr := serveSlowFirst(t, 200*time.Millisecond)
	p := hedging(t)
	p.Policy.KeyTemplate, p.Policy.Operation = "", "GET /v1/status"
	ic := retrygrpc.New(retry.New(watch.NewStatic(p), retry.WithClock(clock.Real{})), p.Policy.Name)
	reply := &healthpb.HealthCheckResponse{}
	err := connOf(t, addr, ic).Invoke(context.Background(), checkMethod, &healthpb.HealthCheckRequest{}, reply)
	if keys := s.seen(); len(keys) != 1 {
		t.Fatalf("the server saw %d calls, want 1: a keyless call is not hedged", len(keys))
	}
	if err != nil || reply.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("got %v, %v; want the one attempt's NOT_SERVING", reply.Status, err)
	}
}

// A permanent answer under a hedging policy reaches the caller as the
// server's own status, as it does without hedging.
func TestUnaryHedgedPermanentAnswerIsTheServersOwn(t *testing.T) {
	h := &health{answer: always(grpccodes.InvalidArgument)}
	p := hedging(t)
	ic := retrygrpc.New(retry.New(watch.NewStatic(p), retry.WithClock(clock.Real{})), p.Policy.Name)
	err := connOf(t, serve(t, h), ic).Invoke(context.Background(), checkMethod, &healthpb.HealthCheckRequest{}, &healthpb.HealthCheckResponse{},
		retrygrpc.WithVars(smsVars))
	var re *retry.Error
	if status.Code(err) != grpccodes.InvalidArgument || errors.As(err, &re) {
		t.Fatalf("got %v, want the server's own INVALID_ARGUMENT", err)
	}
	if n := h.calls(); n != 1 {
		t.Fatalf("the server saw %d calls, want 1", n)
	}
}
