package otlp

import (
	"context"
	"net"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/retryguard/retryguard/contract/policyconfig/fixtures"
	retrygrpc "github.com/retryguard/retryguard/runtime/grpc"
	retryotel "github.com/retryguard/retryguard/runtime/otel"
	"github.com/retryguard/retryguard/runtime/retry"
	"github.com/retryguard/retryguard/runtime/watch"
)

// flakyHealth answers its first Check UNAVAILABLE and every later one
// SERVING, recording each call's traceparent metadata.
type flakyHealth struct {
	grpc_health_v1.UnimplementedHealthServer
	calls atomic.Int32
	seen  traceparents
}

func (h *flakyHealth) Check(ctx context.Context, _ *grpc_health_v1.HealthCheckRequest) (*grpc_health_v1.HealthCheckResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	tp := ""
	if v := md.Get("traceparent"); len(v) == 1 {
		tp = v[0]
	}
	h.seen.add(tp)
	if h.calls.Add(1) == 1 {
		return nil, status.Error(codes.Unavailable, "warming up")
	}
	return &grpc_health_v1.HealthCheckResponse{Status: grpc_health_v1.HealthCheckResponse_SERVING}, nil
}

// A unary call through runtime/grpc's interceptor with the OpenTelemetry
// observer reaches the receiver (over OTLP/gRPC) as one trace: an attempt
// span per attempt under the operation's, the resend carrying
// http.request.resend_count, each attempt's traceparent in its metadata.
func TestGRPCAttemptsAreOneTraceInTheReceiver(t *testing.T) {
	rcv := startReceiver(t)
	exp, err := otlptracegrpc.New(context.Background(), otlptracegrpc.WithEndpoint(rcv.grpcAddr), otlptracegrpc.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	obs, err := retryotel.New(retryotel.WithTracerProvider(tp), retryotel.WithPropagator(propagation.TraceContext{}))
	if err != nil {
		t.Fatal(err)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	health := &flakyHealth{}
	srv := grpc.NewServer()
	grpc_health_v1.RegisterHealthServer(srv, health)
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()

	p := fixtures.SMS()
	p.Policy.ConnectionPool = nil
	ex := retry.New(watch.NewStatic(p), retry.WithObserver(obs))
	ic := retrygrpc.New(ex, p.Policy.Name)
	conn, err := grpc.NewClient(ln.Addr().String(), append(ic.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	res, err := grpc_health_v1.NewHealthClient(conn).Check(context.Background(), &grpc_health_v1.HealthCheckRequest{},
		retrygrpc.WithVars(retry.Vars{"user_id": "42", "login_session_id": "s-9"}))
	if err != nil || res.GetStatus() != grpc_health_v1.HealthCheckResponse_SERVING {
		t.Fatalf("got %v, %v; want the second attempt's SERVING", res, err)
	}

	spans := rcv.spans(t, 3)
	var op span
	var attempts []span
	for _, s := range spans {
		if s.name == "retryguard "+p.Policy.Name {
			op = s
		} else {
			attempts = append(attempts, s)
		}
	}
	if len(attempts) != 2 || op.id == "" {
		t.Fatalf("spans %v, want the operation's and two attempts'", names(spans))
	}
	if v, _ := attempts[0].attr("retryguard.attempt"); v.Int() != 1 {
		attempts[0], attempts[1] = attempts[1], attempts[0]
	}
	seen := health.seen.all()
	if len(seen) != 2 {
		t.Fatalf("the server got %d calls, want 2", len(seen))
	}
	for i, a := range attempts {
		if a.trace != op.trace || a.parent != op.id {
			t.Errorf("attempt %d is %s under %s in trace %s, want a child of the operation's span %s in %s", i+1, a.id, a.parent, a.trace, op.id, op.trace)
		}
		if tr, id := parentID(t, seen[i]); tr != op.trace || id != a.id {
			t.Errorf("call %d carried traceparent %s, want attempt %d's span %s", i+1, seen[i], i+1, a.id)
		}
	}
	if v, ok := attempts[0].attr("error.type"); !ok || v.Str() != "503" {
		t.Errorf("the first attempt's error.type = %v, want 503 (UNAVAILABLE from the server)", v.AsRaw())
	}
	for i, a := range attempts {
		// UNAVAILABLE came in an HTTP/2 200: the status is the mapping's, for error.type, not an HTTP response's.
		if v, ok := a.attr("http.response.status_code"); ok {
			t.Errorf("gRPC attempt %d carries http.response.status_code=%v; no HTTP status was received", i+1, v.AsRaw())
		}
	}
	if v, ok := attempts[1].attr("http.request.resend_count"); !ok || v.Int() != 1 {
		t.Errorf("the second attempt's http.request.resend_count = %v, want 1", v.AsRaw())
	}
}
