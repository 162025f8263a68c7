package main

import (
	"context"
	"errors"

	"google.golang.org/grpc"
	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/retryguard/retryguard/hack/drills/fleet/naive"
	retrygrpc "github.com/retryguard/retryguard/runtime/grpc"
	"github.com/retryguard/retryguard/runtime/retry"
	"github.com/retryguard/retryguard/test/e2e/internal/depgrpc"
)

// grpcDep calls the dependency's gRPC API at target: through runtime/grpc's
// Interceptor under policy (Retryguard runs), or plainly (naive runs). Each
// mode has a channel of its own, as the HTTP modes have a client each.
type grpcDep struct {
	rg    *grpc.ClientConn // the Interceptor's DialOptions: grpc-go's retries off, its stats handler on
	plain *grpc.ClientConn // grpc-go's retries off too: naive's 27 attempts are the only layers
}

// newGRPCDep makes both channels to target (the drill's is in-cluster,
// plaintext); grpc.NewClient connects on the first call.
func newGRPCDep(target string, ex *retry.Executor, policy string) (*grpcDep, error) {
	if ex == nil {
		return nil, errors.New("grpc dependency: no retry.Executor for the Retryguard channel")
	}
	creds := grpc.WithTransportCredentials(insecure.NewCredentials())
	rg, err := grpc.NewClient(target, append(retrygrpc.New(ex, policy).DialOptions(), creds)...)
	if err != nil {
		return nil, err
	}
	plain, err := grpc.NewClient(target, creds, grpc.WithDisableRetry())
	if err != nil {
		_ = rg.Close()
		return nil, err
	}
	return &grpcDep{rg: rg, plain: plain}, nil
}

// retryguard makes one call through the interceptor, rendering the key
// from retry.Vars{"pod": pod, "op": op} (the policy's keyTemplate is
// DRILL-{pod}-{op}). A failure the executor ended is its *retry.Error,
// returned as it is through grpc-go's Invoke: its Code is the failure's
// code (UNKNOWN_OUTCOME is unknown), its message the detail. A server's
// permanent status comes back as the server's own (the interceptor's
// contract, as the RoundTripper returns a 4xx response): its gRPC code
// name is the code, as an HTTP status is for HTTP.
func (g *grpcDep) retryguard(pod, op string) (ok bool, code, detail string, unknown bool) {
	err := depgrpc.Work(context.Background(), g.rg, retrygrpc.WithVars(retry.Vars{"pod": pod, "op": op}))
	var re *retry.Error
	switch {
	case err == nil:
		return true, "", "", false
	case errors.As(err, &re):
		return false, string(re.Code), re.Error(), re.State == retry.UnknownOutcome
	}
	st := status.Convert(err)
	return false, st.Code().String(), st.Message(), false
}

// naive runs the naive chain (naive.Do: 3 × 3 × 3 attempts, fixed delays),
// each attempt bounded by naiveAttemptTimeout and carrying key; its outcome
// is unknown when the last attempt ran out of time (the dependency may have
// applied it), as an HTTP attempt's transport error is.
func (g *grpcDep) naive(key string) (ok, unknown bool) {
	var last error
	_, ok = naive.Do(context.Background(), func(ctx context.Context) bool {
		ctx, cancel := context.WithTimeout(depgrpc.WithKey(ctx, key), naiveAttemptTimeout)
		defer cancel()
		last = depgrpc.Work(ctx, g.plain)
		return last == nil
	})
	return ok, !ok && status.Code(last) == grpccodes.DeadlineExceeded
}

// close closes both channels.
func (g *grpcDep) close() error {
	return errors.Join(g.rg.Close(), g.plain.Close())
}
