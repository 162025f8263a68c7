package retrygrpc

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	"github.com/retryguard/retryguard/runtime/retry"
)

// pushbackHeader is the trailer in which a server states its delay before
// another attempt, in milliseconds (gRPC A6).
const pushbackHeader = "grpc-retry-pushback-ms"

// httpStatus is google.rpc.Code's documented HTTP mapping (googleapis
// google/rpc/code.proto, "HTTP Mapping"; grpc-gateway's HTTPStatusFromCode
// is the same table), through which a policy's retryOn.statusCodes govern a
// server's status. DEADLINE_EXCEEDED (504) and DATA_LOSS (500) are absent on
// purpose: see evidence.
var httpStatus = [...]int{
	grpccodes.Canceled:           499, // Client Closed Request
	grpccodes.Unknown:            http.StatusInternalServerError,
	grpccodes.InvalidArgument:    http.StatusBadRequest,
	grpccodes.NotFound:           http.StatusNotFound,
	grpccodes.AlreadyExists:      http.StatusConflict,
	grpccodes.PermissionDenied:   http.StatusForbidden,
	grpccodes.ResourceExhausted:  http.StatusTooManyRequests,
	grpccodes.FailedPrecondition: http.StatusBadRequest,
	grpccodes.Aborted:            http.StatusConflict,
	grpccodes.OutOfRange:         http.StatusBadRequest,
	grpccodes.Unimplemented:      http.StatusNotImplemented,
	grpccodes.Internal:           http.StatusInternalServerError,
	grpccodes.Unavailable:        http.StatusServiceUnavailable,
	grpccodes.Unauthenticated:    http.StatusUnauthorized,
	grpccodes.DataLoss:           0,
}

// call is what the stats handler saw of one attempt of the executor: the
// attempts grpc-go made within it, and the phase each reached. It is also
// the attempt's context, where the handler finds it (one allocation, not
// two). The transport's reader goroutine reports too, so every field is
// atomic or under mu.
type call struct {
	context.Context

	// watched: the channel was built with DialOptions, so its stats handler
	// sees every attempt grpc-go begins.
	watched bool

	begins   atomic.Int32 // every attempt grpc-go began, transparent retries included
	attempts atomic.Int32 // those that were not transparent retries
	opened   atomic.Bool  // an attempt queued its headers on a connection (stats.OutHeader)
	sent     atomic.Bool  // the last attempt handed its request message to the transport (stats.OutPayload)
	header   atomic.Bool  // the last attempt received the server's headers (stats.InHeader)
	trailer  atomic.Bool  // the last attempt received the server's trailers (stats.InTrailer)
	refusals atomic.Int32 // attempts that ended with grpc-go's status for a stream the server did not process (stats.End)

	mu       sync.Mutex
	pushback []string // the last attempt's grpc-retry-pushback-ms values
	refusal  error    // the last of those statuses
}

type callKey struct{}

// Value finds the call itself under callKey.
func (c *call) Value(key any) any {
	if key == (callKey{}) {
		return c
	}
	return c.Context.Value(key)
}

// TagRPC implements stats.Handler. The call's record is already in ctx.
func (*Interceptor) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }

// HandleRPC implements stats.Handler: it records each attempt's phases in
// the call record the interceptor put in the call's context. Only the
// events the evidence reads look the record up, End only when its status
// is a refusal; the incoming payload and picks cost a type switch.
func (*Interceptor) HandleRPC(ctx context.Context, s stats.RPCStats) {
	switch s := s.(type) {
	case *stats.Begin:
		c := recordOf(ctx, s.Client)
		if c == nil {
			return
		}
		if !s.IsTransparentRetryAttempt {
			c.attempts.Add(1)
		}
		if c.begins.Add(1) == 1 {
			return // the first attempt: nothing to forget
		}
		c.sent.Store(false)
		c.header.Store(false)
		c.trailer.Store(false)
		c.mu.Lock()
		c.pushback = nil
		c.mu.Unlock()
	case *stats.OutHeader:
		if c := recordOf(ctx, s.Client); c != nil {
			c.opened.Store(true)
		}
	case *stats.OutPayload:
		if c := recordOf(ctx, s.Client); c != nil {
			c.sent.Store(true)
		}
	case *stats.End:
		if !unprocessedStatus(s.Error) {
			return // the common end: no lookup
		}
		if c := recordOf(ctx, s.Client); c != nil {
			c.mu.Lock()
			c.refusal = s.Error
			c.mu.Unlock()
			c.refusals.Add(1)
		}
	case *stats.InHeader:
		if c := recordOf(ctx, s.Client); c != nil {
			c.header.Store(true)
		}
	case *stats.InTrailer:
		c := recordOf(ctx, s.Client)
		if c == nil {
			return
		}
		if v := s.Trailer[pushbackHeader]; v != nil { // metadata keys are lower case
			c.mu.Lock()
			c.pushback = v
			c.mu.Unlock()
		}
		c.trailer.Store(true)
	}
}

// recordOf is the call record in a client event's context, nil for a
// server's event or a call the interceptor did not make.
func recordOf(ctx context.Context, client bool) *call {
	if !client {
		return nil
	}
	c, _ := ctx.Value(callKey{}).(*call)
	return c
}

// TagConn implements stats.Handler.
func (*Interceptor) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }

// HandleConn implements stats.Handler.
func (*Interceptor) HandleConn(context.Context, stats.ConnStats) {}

// seen reports whether the stats handler saw the call: every call that
// reaches grpc-go's attempt loop begins at least one attempt.
func (c *call) seen() bool { return c.begins.Load() > 0 }

// judged reports whether the call can be judged by what the stats handler
// saw: it saw the call, or the channel was built with DialOptions, where a
// call it did not see failed before grpc-go began any attempt (stream.go's
// newClientStream reports stats.Begin in newAttemptLocked, before it picks a
// transport).
func (c *call) judged() bool { return c.watched || c.seen() }

// fromServer reports whether the status came from the server: its trailers
// arrived. A call that cannot be judged cannot tell, and its status is taken
// as the server's.
func (c *call) fromServer() bool { return !c.judged() || c.trailer.Load() }

// mayHaveApplied is false only with proof that the server processed
// nothing: no attempt left the process, or the one that left was refused
// unprocessed.
func (c *call) mayHaveApplied(err error) bool {
	return !c.judged() || c.opened.Load() && !c.unprocessed(err)
}

// hiddenRetries is how many retries grpc-go made by itself within one
// attempt of the executor. Transparent retries are not among them: grpc-go
// makes those only for a stream the server never processed (refused, or
// never written), so the dependency still received the call once. A call
// the stats handler did not see shows none.
func (c *call) hiddenRetries() int { return max(int(c.attempts.Load())-1, 0) }

// unprocessed reports whether a failed call reached the server only as
// streams it did not process: grpc-go began one attempt (a transparent
// retry follows only a stream the server did not process: stream.go's
// shouldRetry), the last received neither headers nor trailers, and its
// status is the one grpc-go gives a stream it marks unprocessed, or the
// last was a transparent retry that never sent its request (replayFailed).
func (c *call) unprocessed(err error) bool {
	return c.attempts.Load() == 1 && !c.header.Load() && !c.trailer.Load() && (unprocessedStatus(err) || c.replayFailed(err))
}

// replayFailed reports whether err is the io.EOF grpc-go returns when its
// transparent retry cannot send the request: every earlier attempt ended
// refused unprocessed, and the retry's stream was closed before the request
// was written to it (stream.go: replayBufferLocked's sendMsg on a stream
// the transport has closed returns io.EOF, which withRetry returns as it
// is, not the stream's status, and finish records as a success). How the
// server ended that stream is lost; the proof is that the retry's request
// message never reached the transport (no stats.OutPayload), so the server
// held its headers at most, and a unary call cannot run without its
// request (grpc-go's server decodes it before any handler code).
func (c *call) replayFailed(err error) bool {
	begins := c.begins.Load()
	return err == io.EOF && begins > 1 && c.refusals.Load() == begins-1 && !c.sent.Load()
}

// lastRefusal is the last refusal an attempt ended with: for replayFailed,
// the one that started grpc-go's transparent retry, the last status the
// server is known to have sent.
func (c *call) lastRefusal() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.refusal
}

// grpc-go's statuses for a stream the server did not process. grpc-go
// marks such a stream (ClientStream.Unprocessed, internal/transport) but
// returns only the status, with the same code for a connection lost after
// the server read the call; so its message is the evidence, matched whole,
// and only these (google.golang.org/grpc v1.82.1):
const (
	// http2_client.go handleRSTStream: status.Newf(codes.Unavailable,
	// "stream terminated by RST_STREAM with error code: %v", f.ErrCode) for
	// RST_STREAM(REFUSED_STREAM), the one HTTP/2 code mapped to UNAVAILABLE
	// (http_util.go, http2ErrConvTab). RFC 9113 §8.7: the stream was closed
	// before any processing.
	refusedStreamMessage = "stream terminated by RST_STREAM with error code: REFUSED_STREAM"
	// transport.go errStreamDrain, which http2_client.go's handleGoAway
	// gives every stream above a GOAWAY's last stream ID (RFC 9113 §6.8:
	// not processed), and which NewStream and controlbuf.go give a stream
	// never written to a draining connection.
	drainingMessage = "the connection is draining"
)

// unprocessedStatus reports whether err is grpc-go's UNAVAILABLE for a
// stream the server did not process.
func unprocessedStatus(err error) bool {
	var se interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &se) {
		return false
	}
	st := se.GRPCStatus()
	return st.Code() == grpccodes.Unavailable && (st.Message() == refusedStreamMessage || st.Message() == drainingMessage)
}

// delay reads grpc-retry-pushback-ms as gRPC A6 defines it: one value, a
// non-negative integer of milliseconds; anything else (a sign, a word,
// several values) means "do not retry", a negative retry.StatusError.Delay.
func (c *call) delay() time.Duration {
	c.mu.Lock()
	v := c.pushback
	c.mu.Unlock()
	switch {
	case v == nil:
		return 0
	case len(v) != 1:
		return -1
	}
	ms, err := strconv.ParseUint(v[0], 10, 31)
	if err != nil {
		return -1
	}
	return time.Duration(ms) * time.Millisecond
}

// evidence turns a failed attempt's status into what retry.Executor.Do
// classifies, from the phase the attempt reached rather than from the
// message (the table in the package doc):
//
//   - no attempt queued its headers on a connection: nothing left the
//     process (retry.NotDispatched); an UNAVAILABLE then is a connection
//     that could not be made (ConnectionRefused), a DEADLINE_EXCEEDED a
//     Timeout before dispatch;
//   - a stream the server refused unprocessed (REFUSED_STREAM, or above a
//     GOAWAY's last stream ID) is not dispatched either: a refusal,
//     ConnectionRefused;
//   - DEADLINE_EXCEEDED after dispatch, from either side, is a Timeout: the
//     write may have happened;
//   - a status the client made up after dispatch, without the server's
//     trailers: UNAVAILABLE is a connection lost mid-call (ConnectionReset,
//     ambiguous), any other is evidence no policy lists;
//   - a status from the server is its HTTP mapping (a *retry.StatusError),
//     with grpc-retry-pushback-ms as the server's delay; DATA_LOSS, which
//     says the server cannot tell what it kept, is an outcome the executor
//     holds unknown.
func (c *call) evidence(err error) error {
	code := status.Code(err)
	switch {
	case c.judged() && !c.opened.Load():
		switch code {
		case grpccodes.Unavailable:
			return retry.NotDispatched(&attemptError{err: err, cause: syscall.ECONNREFUSED, note: "no connection: nothing was sent"})
		case grpccodes.DeadlineExceeded:
			return retry.NotDispatched(&attemptError{err: err, cause: context.DeadlineExceeded, note: "before any connection: nothing was sent"})
		}
		return retry.NotDispatched(err)
	case code == grpccodes.DeadlineExceeded:
		return &attemptError{err: err, cause: context.DeadlineExceeded, note: "the call may have been applied"}
	case !c.fromServer():
		if c.unprocessed(err) {
			st, note := err, "the server refused the stream unprocessed"
			if err == io.EOF { // replayFailed: io.EOF is no status
				st = c.lastRefusal()
				note += ", and grpc-go's transparent retry of it ended before its request was sent (grpc-go returned io.EOF, not how the retry's stream ended)"
			}
			return retry.NotDispatched(&attemptError{err: st, cause: syscall.ECONNREFUSED, note: note})
		}
		if code == grpccodes.Unavailable {
			return &attemptError{err: err, cause: io.ErrUnexpectedEOF, note: "the connection ended before the server's status: the call may have been applied"}
		}
		return err
	case int(code) >= len(httpStatus) || httpStatus[code] == 0:
		return err
	}
	return &attemptError{err: err, cause: &retry.StatusError{Code: httpStatus[code], Delay: c.delay()}}
}

// attemptError is a gRPC status with the evidence Do classifies (a
// *retry.StatusError, or a transport failure's sentinel); both stay
// reachable through errors.As and status.FromError.
type attemptError struct {
	err   error
	cause error
	note  string
}

func (e *attemptError) Error() string {
	if e.note == "" {
		return e.err.Error()
	}
	return e.err.Error() + " (" + e.note + ")"
}

func (e *attemptError) Unwrap() []error { return []error{e.err, e.cause} }
