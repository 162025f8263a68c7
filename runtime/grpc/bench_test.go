package retrygrpc_test

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

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
// grpc-go server: bare, and through the Interceptor under RETRY-SMS-001's
// policy (its key rendered and sent as metadata, its deadline, its budget,
// the stats handler), in the same run (docs/benchmarks.md).
func BenchmarkUnary(b *testing.B) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	s := grpc.NewServer()
	healthpb.RegisterHealthServer(s, serving{})
	go func() { _ = s.Serve(lis) }()
	b.Cleanup(s.Stop)
	addr := lis.Addr().String()
	p := grpcPolicy()
	ic := retrygrpc.New(retry.New(watch.NewStatic(p)), p.Policy.Name)
	for _, bc := range []struct {
		name string
		opts []grpc.DialOption
		call []grpc.CallOption
	}{
		{"bare", nil, nil},
		{"retryguard", ic.DialOptions(), []grpc.CallOption{retrygrpc.WithVars(smsVars)}},
	} {
		client := dial(b, addr, bc.opts...)
		req := &healthpb.HealthCheckRequest{}
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := client.Check(context.Background(), req, bc.call...); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
