package retrygrpc_test

import (
	"context"
	"net"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"

	retrygrpc "github.com/retryguard/retryguard/runtime/grpc"
	"github.com/retryguard/retryguard/runtime/retry"
	"github.com/retryguard/retryguard/runtime/watch"
)

// serving answers every Check at once, recording nothing, so that the
// benchmark times the client's path.
type serving struct {
	healthpb.UnimplementedHealthServer
}

var servingResponse = &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}

func (serving) Check(context.Context, *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	return servingResponse, nil
}

// BenchmarkUnary is a successful unary call over TCP loopback to a real
// grpc-go server: bare; by hand with what the Interceptor puts on the wire
// (the policy's 4 s deadline, the idempotency-key metadata); and through the
// Interceptor under RETRY-SMS-001's policy (its key rendered, its deadline,
// its budget, the stats handler), in the same run. BenchmarkUnaryPaired is
// the one to read for the ratios (docs/benchmarks.md); this one gives each
// variant's allocations.
func BenchmarkUnary(b *testing.B) {
	addr, ic := benchServer(b)
	deadline := grpcPolicy().Policy.Deadline.D()
	for _, bc := range []struct {
		name   string
		opts   []grpc.DialOption
		call   []grpc.CallOption
		byHand bool
	}{
		{"bare", nil, nil, false},
		{"byhand", nil, nil, true},
		{"byhand-stats-handler", []grpc.DialOption{grpc.WithStatsHandler(noStats{})}, nil, true},
		{"retryguard", ic.DialOptions(), []grpc.CallOption{retrygrpc.WithVars(smsVars)}, false},
	} {
		client := dial(b, addr, bc.opts...)
		req := &healthpb.HealthCheckRequest{}
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				if bc.byHand {
					ctx, cancel = context.WithTimeout(ctx, deadline)
					ctx = metadata.AppendToOutgoingContext(ctx, "idempotency-key", smsKey)
				}
				_, err := client.Check(ctx, req, bc.call...)
				cancel()
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func benchServer(b *testing.B) (string, *retrygrpc.Interceptor) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	s := grpc.NewServer()
	healthpb.RegisterHealthServer(s, serving{})
	go func() { _ = s.Serve(lis) }()
	b.Cleanup(s.Stop)
	p := grpcPolicy()
	return lis.Addr().String(), retrygrpc.New(retry.New(watch.NewStatic(p)), p.Policy.Name)
}

// BenchmarkUnaryPaired makes four calls in every iteration, each on its
// own channel, in an order that rotates: a bare call; the same call carrying
// what the Interceptor puts on the wire (the policy's 4 s deadline as
// grpc-timeout and the idempotency-key metadata), as an application would
// write it by hand without retries; that call on a channel with a stats
// handler that does nothing (what grpc-go's events cost any handler, the
// floor of evidence gathered through one); and the call through the
// Interceptor. It reports each one's mean wall time, the ratios, and the CPU
// ratios (the process's CPU time, client and server): on shared cores,
// whatever slows one call slows its neighbours too, and no variant always
// goes first.
func BenchmarkUnaryPaired(b *testing.B) {
	addr, ic := benchServer(b)
	req, deadline := &healthpb.HealthCheckRequest{}, grpcPolicy().Policy.Deadline.D()
	bare, byHand, guarded := dial(b, addr), dial(b, addr), dial(b, addr, ic.DialOptions()...)
	handled := dial(b, addr, grpc.WithStatsHandler(noStats{}))
	vars := retrygrpc.WithVars(smsVars)
	withKey := func(client healthpb.HealthClient) error {
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		_, err := client.Check(metadata.AppendToOutgoingContext(ctx, "idempotency-key", smsKey), req)
		return err
	}
	const bareCall, byHandCall, handledCall, guardedCall = 0, 1, 2, 3
	calls := [4]func() error{
		bareCall:    func() error { _, err := bare.Check(context.Background(), req); return err },
		byHandCall:  func() error { return withKey(byHand) },
		handledCall: func() error { return withKey(handled) },
		guardedCall: func() error { _, err := guarded.Check(context.Background(), req, vars); return err },
	}
	var spent, cpu [4]time.Duration
	i := 0
	for b.Loop() {
		for k := range len(calls) {
			v := (i + k) % len(calls)
			t, c := time.Now(), cpuTime()
			if err := calls[v](); err != nil {
				b.Fatal(err)
			}
			spent[v] += time.Since(t)
			cpu[v] += cpuTime() - c
		}
		i++
	}
	n := float64(b.N)
	b.ReportMetric(float64(spent[bareCall].Nanoseconds())/n, "bare-ns/call")
	b.ReportMetric(float64(spent[byHandCall].Nanoseconds())/n, "byhand-ns/call")
	b.ReportMetric(float64(spent[handledCall].Nanoseconds())/n, "handled-ns/call")
	b.ReportMetric(float64(spent[guardedCall].Nanoseconds())/n, "retryguard-ns/call")
	b.ReportMetric(float64(spent[guardedCall])/float64(spent[bareCall]), "ratio")
	b.ReportMetric(float64(spent[guardedCall])/float64(spent[byHandCall]), "ratio-to-byhand")
	b.ReportMetric(float64(cpu[guardedCall])/float64(cpu[bareCall]), "cpu-ratio")
	b.ReportMetric(float64(cpu[guardedCall])/float64(cpu[byHandCall]), "cpu-ratio-to-byhand")
	b.ReportMetric(float64(cpu[handledCall])/float64(cpu[bareCall]), "handled-cpu-ratio")
	b.ReportMetric(float64(cpu[byHandCall])/float64(cpu[bareCall]), "byhand-cpu-ratio")
	b.ReportMetric(float64(cpu[guardedCall])/float64(cpu[handledCall]), "cpu-ratio-to-handled")
}

// noStats is a stats.Handler that does nothing: a channel with it pays only
// what grpc-go spends reporting each event.
type noStats struct{}

func (noStats) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context   { return ctx }
func (noStats) HandleRPC(context.Context, stats.RPCStats)                         {}
func (noStats) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (noStats) HandleConn(context.Context, stats.ConnStats)                       {}

// cpuTime is the CPU time the process (client and server alike) has used:
// what a call costs the machine, whatever else runs on it.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
