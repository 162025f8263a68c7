// Package retrygrpc enforces published Retryguard policies on grpc-go unary
// calls. It is a module of its own, so that applications that make only HTTP
// calls do not take grpc-go in.
//
//	ic := retrygrpc.New(retry.New(policies), "sms-2fa-dispatch")
//	conn, err := grpc.NewClient(target, append(ic.DialOptions(), grpc.WithTransportCredentials(creds))...)
//	_, err = client.Send(ctx, req, retrygrpc.WithVars(retry.Vars{"user_id": "42", "login_session_id": "s-9"}))
//
// Each call is one logical operation of retry.Executor.Do: attempts,
// full-jitter backoff, the deadline, the retry budget and the dead letters
// are the policy's, exactly as for HTTP. Every attempt carries the rendered
// idempotency key as metadata (the policy's idempotencyHeader in lower case,
// as gRPC requires), the same on every attempt (INV-RTY-05); and runs on a
// context bounded by what is left of the deadline, which grpc-go sends to
// the server as grpc-timeout.
//
// Under a policy with hedging, a unary call whose reply is a proto.Message
// runs through retry.Executor.DoHedged: an attempt still pending after the
// hedging delay is hedged, with the same key, if the budget allows; each
// attempt invokes into a reply, header, trailer and peer of its own, and
// only the winner's reach the caller (docs/runtime.md, Hedging). A call
// without the key sends no hedge beside an attempt in flight. Streams are
// not intercepted, so they never hedge.
//
// # Status codes
//
// Policies list HTTP statuses in retryOn.statusCodes and transport failures
// in retryOn.errors. A server's status reaches Do as its HTTP mapping, the one
// google.rpc.Code documents (google/rpc/code.proto, also grpc-gateway's), so
// that one policy reads the same over both protocols:
//
//	status                         what Do sees                     class (docs/runtime.md)
//	OK                             success
//	UNAVAILABLE from the server    503                              transient when 503 is listed
//	RESOURCE_EXHAUSTED             429, grpc-retry-pushback-ms      transient when 429 is listed; the pushback
//	                               as the server's delay            is honoured as Retry-After is
//	UNAVAILABLE made by grpc-go    ConnectionRefused before any     not dispatched: transient when listed
//	                               header left, or for a stream the
//	                               server refused unprocessed
//	                               ConnectionReset otherwise        ambiguous: the server may have read the call
//	DEADLINE_EXCEEDED              Timeout (not 504)                ambiguous: the write may have happened
//	INVALID_ARGUMENT, FAILED_PRECONDITION, OUT_OF_RANGE  400        permanent (INV-RTY-03)
//	UNAUTHENTICATED 401, PERMISSION_DENIED 403, NOT_FOUND 404       permanent
//	ALREADY_EXISTS 409, ABORTED 409                                 permanent: RG-RETRY, 409 needs a reread, not a replay
//	CANCELED                       499                              permanent
//	UNKNOWN, INTERNAL              500                              unrecognized (terminal) unless 500 is listed
//	UNIMPLEMENTED                  501                              unrecognized: admission never lets 501 be listed
//	DATA_LOSS                      not mapped                       unknown outcome: the server cannot say what it kept
//
// The status is judged by the phase the attempt reached, which the
// Interceptor's stats handler sees, and by its message only where grpc-go
// states nothing else (a refused stream):
//
//   - An attempt none of whose grpc-go attempts put its headers on a
//     connection (no stats.OutHeader) sent nothing: it is proven not
//     dispatched. Its UNAVAILABLE is a connection that could not be made
//     and counts as ConnectionRefused whatever the cause (refused, DNS,
//     every TLS handshake failure: grpc-go states the dial's error only as
//     text, so a certificate failure cannot be told apart and is retried as
//     a refused connection); its DEADLINE_EXCEEDED is a Timeout before
//     dispatch. On a channel built with DialOptions, a call the handler did
//     not see at all failed before grpc-go began an attempt, and sent
//     nothing either.
//   - A stream the server refused unprocessed (RST_STREAM REFUSED_STREAM,
//     or a GOAWAY below its ID: RFC 9113 §8.7, §6.8) is proven not
//     dispatched too, a ConnectionRefused. grpc-go marks such a stream but
//     returns only its UNAVAILABLE, so its exact message for it is the
//     evidence, taken only after one attempt that received neither headers
//     nor trailers. So is the bare io.EOF grpc-go returns when its
//     transparent retry's stream is closed before the request is written:
//     after attempts that all ended refused, with no request message sent
//     on the retry (no stats.OutPayload); it reports the refusal's status.
//   - A status the client made up after dispatch (no server trailers):
//     UNAVAILABLE is a connection lost mid-call, ConnectionReset, ambiguous,
//     never the server's 503; DEADLINE_EXCEEDED is a Timeout; any other
//     (CANCELED because the caller gave up, a reply too large to receive, an
//     unmarshalable message) is unrecognized, terminal (MC-FM-01).
//
// # Replay safety
//
// Every gRPC call is an HTTP/2 POST: only the policy's idempotency key makes
// it safe to send again. An attempt without a key that may have been applied
// is never sent again, whatever the policy's operation says
// (ErrNotReplaySafe); an attempt proven not dispatched may be.
//
// # grpc-go's own retries
//
// A service config's retryPolicy (from the resolver, or
// grpc.WithDefaultServiceConfig) makes grpc-go retry below the interceptor,
// a hidden layer that multiplies the policy's attempts (RG-RETRY: three
// layers of three attempts make 27 calls). DialOptions disables it with
// grpc.WithDisableRetry. One Interceptor serves any number of channels, and
// judges each call by what its own channel showed:
//
//   - On a channel built with the interceptor and its stats handler but
//     without DialOptions, the handler counts grpc-go's attempts of each
//     call. When there was more than one, each extra attempt asks the
//     policy's retry budget (it was sent: a refusal cannot recall it), the
//     operation ends with that attempt (retry.Final: no further attempt, no
//     backoff, the budget not asked again), and a failed call's error
//     matches ErrHiddenRetries and keeps the server's status.
//   - On a channel built with Unary alone, a call the stats handler did not
//     see cannot be judged: it gets one attempt, the budget is not asked
//     (nothing counted grpc-go's attempts), and a failed call's error
//     matches ErrWithoutDialOptions.
//
// Transparent retries are not hidden retries: grpc-go makes them only for a
// stream the server never processed (refused or never written), whatever
// the options, and the server still receives the call once.
package retrygrpc
