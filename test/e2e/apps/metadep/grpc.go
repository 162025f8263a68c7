package main

import (
	"context"
	"net/http"
	"strconv"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/retryguard/retryguard/test/e2e/internal/depgrpc"
)

// pushbackTrailer is gRPC's Retry-After (gRPC A6): the server's delay
// before another attempt, in milliseconds.
const pushbackTrailer = "grpc-retry-pushback-ms"

// workGRPC answers one call of the gRPC API (depgrpc) as serve answers POST
// /v1/work, in the statuses runtime/grpc maps back to the same HTTP ones
// (runtime/grpc/doc.go): 201 is OK, 503 UNAVAILABLE from the server, 429
// RESOURCE_EXHAUSTED with RetryAfter as the pushback. A client gone first
// gets its context's error, which grpc-go does not send to a stream that
// has ended.
func (d *dep) workGRPC(ctx context.Context, key string) error {
	code, err := d.answer(ctx, key)
	switch {
	case err != nil:
		return err
	case code == http.StatusCreated:
		return nil
	case code == http.StatusTooManyRequests:
		// The only metadata this handler sets: SetTrailer fails only outside a call.
		_ = grpc.SetTrailer(ctx, metadata.Pairs(pushbackTrailer, strconv.Itoa(d.cfg.RetryAfter*1000)))
		return grpcstatus.Error(codes.ResourceExhausted, "throttled")
	}
	return grpcstatus.Errorf(codes.Unavailable, "%d %s", code, http.StatusText(code))
}

// grpcServer is the gRPC API's server, answered by d.
func (d *dep) grpcServer() *grpc.Server {
	s := grpc.NewServer()
	depgrpc.Register(s, d.workGRPC)
	return s
}
