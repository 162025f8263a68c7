// Package depgrpc is the fleet drill's dependency's gRPC API (metadep serves
// it, fleetclient calls it), written by hand so that the drill needs no
// protoc: one service, retryguard.drill.v1.Dependency, with one unary method,
// Work, whose request and reply are google.protobuf.Empty. The operation's
// idempotency key travels as the metadata KeyMetadata, as runtime/grpc sends
// a policy's idempotencyHeader (Idempotency-Key, lower-cased).
package depgrpc

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

// ServiceName is the service's full name.
const ServiceName = "retryguard.drill.v1.Dependency"

// FullMethod is Work's method name on the wire, and a RetryPolicy's
// operation for it.
const FullMethod = "/" + ServiceName + "/Work"

// KeyMetadata is the metadata key that carries the idempotency key.
const KeyMetadata = "idempotency-key"

// WorkFunc does one request's work: key is the request's idempotency key
// ("" when it carries none). Its error is the call's status (a status.Error;
// a context's error becomes its gRPC code).
type WorkFunc func(ctx context.Context, key string) error

// Register registers the service on s, each call answered by work.
func Register(s grpc.ServiceRegistrar, work WorkFunc) {
	s.RegisterService(&serviceDesc, work)
}

// serviceDesc is what protoc-gen-go-grpc would generate; HandlerType is an
// interface the registered WorkFunc satisfies, since RegisterService checks
// the implementation against it.
var serviceDesc = grpc.ServiceDesc{
	ServiceName: ServiceName,
	HandlerType: (*any)(nil),
	Methods:     []grpc.MethodDesc{{MethodName: "Work", Handler: handle}},
	Streams:     []grpc.StreamDesc{},
	Metadata:    "retryguard/drill/v1/dependency.proto",
}

// handle decodes the request and runs the registered WorkFunc through the
// server's interceptor, if it has one, as generated code does.
func handle(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	in := new(emptypb.Empty)
	if err := dec(in); err != nil {
		return nil, err
	}
	work, ok := srv.(WorkFunc)
	if !ok { // only Register registers serviceDesc, with a WorkFunc
		return nil, status.Errorf(codes.Internal, "depgrpc: %T registered as the service, want a WorkFunc", srv)
	}
	call := func(ctx context.Context, _ any) (any, error) {
		if err := work(ctx, Key(ctx)); err != nil {
			return nil, err
		}
		return &emptypb.Empty{}, nil
	}
	if interceptor == nil {
		return call(ctx, in)
	}
	return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: FullMethod}, call)
}

// Key is the idempotency key of the incoming call in ctx: the first
// KeyMetadata value, "" when there is none.
func Key(ctx context.Context) string {
	if v := metadata.ValueFromIncomingContext(ctx, KeyMetadata); len(v) > 0 {
		return v[0]
	}
	return ""
}

// WithKey is ctx with key as the outgoing call's idempotency key, for a
// caller without the interceptor (the naive chain, tests).
func WithKey(ctx context.Context, key string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, KeyMetadata, key)
}

// Work calls the dependency's Work on cc. The key is the caller's to put in
// the outgoing metadata (runtime/grpc's interceptor does, from its policy).
func Work(ctx context.Context, cc grpc.ClientConnInterface, opts ...grpc.CallOption) error {
	return cc.Invoke(ctx, FullMethod, &emptypb.Empty{}, new(emptypb.Empty), opts...)
}
