package retrygrpc_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/contract/policyconfig/fixtures"
	"github.com/retryguard/retryguard/runtime/budget"
	"github.com/retryguard/retryguard/runtime/clock"
	retrygrpc "github.com/retryguard/retryguard/runtime/grpc"
	"github.com/retryguard/retryguard/runtime/retry"
	"github.com/retryguard/retryguard/runtime/watch"
)

// checkMethod is the one method the tests call: grpc-go's own health
// service, so that no generated code is needed.
const checkMethod = "/grpc.health.v1.Health/Check"

var smsVars = retry.Vars{"user_id": "42", "login_session_id": "s-9"}

const smsKey = "SMS-2FA-42-s-9"

// grpcPolicy is RETRY-SMS-001's policy governing a gRPC method: three
// attempts, a 4 s deadline, 429/503/504 and every transport failure listed,
// a stable key in Idempotency-Key, and the telephony-provider budget.
func grpcPolicy(change ...func(*policyconfig.Policy)) *policyconfig.Payload {
	p := fixtures.SMS()
	p.Policy.Operation = checkMethod
	p.Policy.ConnectionPool = nil
	for _, c := range change {
		c(&p.Policy)
	}
	return p
}

// keyless is a policy without a key template: no attempt is replay-safe.
func keyless(p *policyconfig.Policy) { p.KeyTemplate = "" }

// sleeps is a virtual clock that records every backoff the executor waits.
type sleeps struct {
	*clock.Virtual
	mu    sync.Mutex
	waits []time.Duration
}

func newSleeps() *sleeps { return &sleeps{Virtual: clock.NewVirtual(time.Now())} }

func (s *sleeps) Sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.waits = append(s.waits, d)
	s.mu.Unlock()
	return s.Virtual.Sleep(ctx, d)
}

func (s *sleeps) all() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.waits...)
}

// health is a real grpc-go health server whose answer to the n-th call
// (from 1) the test chooses. It records what each call carried.
type health struct {
	healthpb.UnimplementedHealthServer
	answer func(ctx context.Context, n int) error

	mu        sync.Mutex
	keys      [][]string      // the idempotency-key metadata of each call
	deadlines []time.Duration // what each call had left of its deadline (0: none)
}

func (h *health) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	var left time.Duration
	if d, ok := ctx.Deadline(); ok {
		left = time.Until(d)
	}
	h.mu.Lock()
	h.keys = append(h.keys, md.Get("idempotency-key"))
	h.deadlines = append(h.deadlines, left)
	n := len(h.keys)
	h.mu.Unlock()
	if h.answer != nil {
		if err := h.answer(ctx, n); err != nil {
			return nil, err
		}
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

func (h *health) calls() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.keys)
}

func (h *health) seen() (keys [][]string, deadlines []time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([][]string(nil), h.keys...), append([]time.Duration(nil), h.deadlines...)
}

// serve starts h on a TCP loopback listener and returns its address.
func serve(t testing.TB, h *health) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return serveOn(t, lis, h)
}

func serveOn(t testing.TB, lis net.Listener, h *health) string {
	t.Helper()
	s := grpc.NewServer()
	healthpb.RegisterHealthServer(s, h)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

// dial opens a channel to addr with opts and plaintext credentials.
func dial(t testing.TB, addr string, opts ...grpc.DialOption) healthpb.HealthClient {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+addr, append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return healthpb.NewHealthClient(conn)
}

// guarded returns an Interceptor for policy p on a recording virtual clock.
func guarded(p *policyconfig.Payload, opts ...retry.Option) (*retrygrpc.Interceptor, *retry.Executor, *sleeps) {
	clk := newSleeps()
	ex := retry.New(watch.NewStatic(p), append([]retry.Option{retry.WithClock(clk)}, opts...)...)
	return retrygrpc.New(ex, p.Policy.Name), ex, clk
}

func check(client healthpb.HealthClient, opts ...grpc.CallOption) error {
	_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{}, append(opts, retrygrpc.WithVars(smsVars))...)
	return err
}

// retryingServiceConfig makes grpc-go itself retry UNAVAILABLE up to four
// attempts: the hidden layer.
const retryingServiceConfig = `{"methodConfig": [{"name": [{"service": "grpc.health.v1.Health"}], "retryPolicy": {
  "maxAttempts": 4, "initialBackoff": "0.01s", "maxBackoff": "0.01s", "backoffMultiplier": 1,
  "retryableStatusCodes": ["UNAVAILABLE"]}}]}`

// letters is a dead-letter sink in memory.
type letters struct {
	mu  sync.Mutex
	all []retry.DeadLetter
}

func (l *letters) Write(_ context.Context, d retry.DeadLetter) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.all = append(l.all, d)
	return nil
}

func (l *letters) written() []retry.DeadLetter {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]retry.DeadLetter(nil), l.all...)
}

// counted sums a counter or a histogram's count of the named family.
func counted(t *testing.T, reg *prometheus.Registry, name string) int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := uint64(0)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			total += uint64(m.GetCounter().GetValue()) + m.GetHistogram().GetSampleCount()
		}
	}
	return int(total)
}

// observed is an Interceptor for policy p with metrics in a registry of
// their own and dead letters in memory.
func observed(p *policyconfig.Payload) (*retrygrpc.Interceptor, *budget.Budget, *sleeps, *prometheus.Registry, *letters) {
	reg, dead := prometheus.NewRegistry(), &letters{}
	ic, ex, clk := guarded(p, retry.WithMetrics(retry.NewMetrics(reg)), retry.WithDeadLetters(dead))
	b, _ := ex.Budget(p.Policy.Name)
	return ic, b, clk, reg, dead
}
