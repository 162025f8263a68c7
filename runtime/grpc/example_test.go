package retrygrpc_test

import (
	"context"
	"errors"
	"fmt"
	"net"

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

// The payload a pod reads from the ConfigMap the controller publishes for a
// RetryPolicy whose operation is a gRPC method.
const checkPayload = `{
  "schemaVersion": "policy.retryguard.io/payload/v1",
  "policy": {
    "namespace": "auth", "name": "health-check", "generation": 1,
    "service": "telephony-api", "operation": "/grpc.health.v1.Health/Check", "layer": "connector",
    "maxAttempts": 3, "leafAttempts": 3,
    "backoff": {"jitter": "Full", "base": "100ms", "cap": "3s", "multiplier": 2},
    "deadline": "4s", "minRemaining": "500ms", "retryAfterMaxDelay": "3s",
    "retryOnStatusCodes": [429, 503], "retryOnErrors": ["ConnectionRefused", "Timeout"],
    "idempotencyHeader": "Idempotency-Key", "keyTemplate": "check-{request_id}",
    "budgetRef": "telephony-provider", "criticality": "Critical"
  },
  "budget": {"name": "telephony-provider", "generation": 1, "retryPercent": 10, "window": "1m0s",
             "maxTokens": 10, "partitions": 1},
  "enforcement": {"mode": "Enforced"}
}`

// flaky is the dependency: UNAVAILABLE once, then SERVING.
type flaky struct {
	healthpb.UnimplementedHealthServer
	calls int
}

func (f *flaky) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	f.calls++
	md, _ := metadata.FromIncomingContext(ctx)
	_, hasDeadline := ctx.Deadline()
	fmt.Printf("server: call %d, idempotency-key %s, deadline %t\n", f.calls, md.Get("idempotency-key"), hasDeadline)
	if f.calls == 1 {
		return nil, status.Error(grpccodes.Unavailable, "draining")
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

func ExampleInterceptor() {
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	server := grpc.NewServer()
	healthpb.RegisterHealthServer(server, &flaky{})
	go func() { _ = server.Serve(lis) }()
	defer server.Stop()

	// In a pod: policies := watch.NewFiles("/etc/retryguard/policies") and
	// retry.New(policies). The virtual clock only keeps the example fast.
	p, err := policyconfig.Parse([]byte(checkPayload))
	if err != nil {
		fmt.Println(err)
		return
	}
	ex := retry.New(watch.NewStatic(p), retry.WithClock(clock.NewVirtual(clock.Real{}.Now())))
	ic := retrygrpc.New(ex, "health-check")
	conn, err := grpc.NewClient(lis.Addr().String(), append(ic.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()

	res, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{},
		retrygrpc.WithVars(retry.Vars{"request_id": "r-7"}))
	var re *retry.Error
	switch {
	case errors.As(err, &re):
		fmt.Println("not completed:", re.Code, re.State) // UNKNOWN_OUTCOME goes to reconciliation
	case err != nil:
		fmt.Println("the server's answer:", status.Code(err)) // a permanent status, once
	default:
		fmt.Println("client:", res.GetStatus())
	}
	// Output:
	// server: call 1, idempotency-key [check-r-7], deadline true
	// server: call 2, idempotency-key [check-r-7], deadline true
	// client: SERVING
}
