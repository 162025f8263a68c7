package retry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retryguard/retryguard/contract/codes"
	"github.com/retryguard/retryguard/contract/httprules"
)

type varsKey struct{}

// WithVars attaches the key template's variables to a request's context.
func WithVars(ctx context.Context, vars Vars) context.Context {
	return context.WithValue(ctx, varsKey{}, vars)
}

// DefaultMaxBufferedBody is the largest request body a RoundTripper keeps in
// memory so that it can send it again, when MaxBufferedBody is 0: 64 KiB,
// above the JSON bodies of the APIs it fronts and small enough that a
// thousand requests in flight hold at most 64 MiB (RG-RETRY: "bounded
// buffering may permit retry").
const DefaultMaxBufferedBody = 64 << 10

// RoundTripper runs each request as one logical operation under Policy:
// every attempt carries the same idempotency header, responses are
// classified by status, and Retry-After is honoured. It is safe for
// concurrent use, and never modifies the request it is given.
//
// A success, or a permanent status (a 4xx the caller must see), returns the
// response, readable until the caller closes its body or reads it to EOF.
// A 101 Switching Protocols response is returned as it is, its body the
// connection the caller now owns (an io.ReadWriteCloser), its attempt ended.
// Anything else that did not complete returns an *Error.
//
// Replay safety is the request's own: a request whose method is not
// idempotent and that does not carry the policy's rendered key is never sent
// again once it may have reached the dependency, whatever the policy's
// operation says; only proof that it never left (a refused connection, a
// failed lookup or dial) permits another attempt. A body is kept to send
// again up to MaxBufferedBody; a larger one, without GetBody, gets one
// attempt. net/http's own re-send of a request already sent (on a reused
// keep-alive connection) is refused: the next attempt, if any, is the
// policy's, after its backoff and with its budget.
//
// A hedging policy hedges a request that is replay-safe and whose body can
// be sent again: each attempt is its own copy of the request, with the
// same key; the first success is returned and the other attempts are
// cancelled and closed before RoundTrip returns (docs/runtime.md, "Hedging").
type RoundTripper struct {
	Executor *Executor
	Policy   string
	// Base sends each attempt. When nil, the policy's connection pool from
	// Pools is used, or http.DefaultTransport for a policy without one.
	Base  http.RoundTripper
	Pools *Pools
	// MaxBufferedBody bounds, in bytes, the request body kept to send again:
	// 0 means DefaultMaxBufferedBody, a negative value keeps none. A request
	// with GetBody is re-read through it instead, whatever its size.
	MaxBufferedBody int64
}

// RoundTrip implements http.RoundTripper.
func (rt *RoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	base, err := rt.base(req)
	if err != nil {
		closeBody(req)
		return nil, err
	}
	c := &call{req: req, base: base, idempotent: httprules.IsIdempotentMethod(req.Method), observer: rt.Executor.observer}
	if err := c.keepBody(rt.maxBufferedBody()); err != nil {
		return nil, err
	}
	c.hooks = newHooks(req.Context(), c)
	defer c.hooks.done()
	c.ctx = httptrace.WithClientTrace(req.Context(), &c.hooks.trace)
	vars, _ := req.Context().Value(varsKey{}).(Vars)
	err = rt.Executor.do(req.Context(), rt.Policy, vars, nil, c, false)
	if !c.sentBody {
		closeBody(req) // no attempt took the body, and RoundTrip must close it (net/http's contract)
	}
	if c.next != nil {
		_ = c.next.Close() // a body read for a retry that did not run
	}
	if err == nil {
		return c.deliver(), nil
	}
	var re *Error
	if errors.As(err, &re) && re.State == TerminalExhausted && re.Code == codes.PermanentFailure && c.res != nil {
		return c.deliver(), nil // the dependency's own answer, for the caller to read
	}
	c.discard()
	return nil, err
}

func (rt *RoundTripper) maxBufferedBody() int64 {
	switch {
	case rt.MaxBufferedBody == 0:
		return DefaultMaxBufferedBody
	case rt.MaxBufferedBody < 0:
		return 0
	}
	return rt.MaxBufferedBody
}

// errNoExecutor is a RoundTripper's error without an Executor to run its
// requests: a clear error, never a panic.
var errNoExecutor = errors.New("retryguard: RoundTripper.Executor is nil")

// base returns the transport for req, or the error the bare transport gives
// a request it cannot send (net/http's own words for a request without a URL
// or a header map), before any attempt: bad input is an error, never a panic.
func (rt *RoundTripper) base(req *http.Request) (http.RoundTripper, error) {
	switch {
	case rt.Executor == nil:
		return nil, errNoExecutor
	case req.URL == nil:
		return nil, errors.New("http: nil Request.URL")
	case req.Header == nil:
		return nil, errors.New("http: nil Request.Header")
	}
	if rt.Base != nil {
		return rt.Base, nil
	}
	if rt.Pools != nil {
		if p, ok := rt.Executor.source.Policy(rt.Policy); ok && p.Policy.ConnectionPool != nil {
			return rt.Pools.Transport(&p.Policy)
		}
	}
	return http.DefaultTransport, nil
}

// call is one RoundTrip: the caller's request, the body kept to send again,
// and the attempt in flight. Its attempts run one after another on the
// caller's goroutine, except a hedging policy's: each of those runs as a
// call forked from this one, on a goroutine of its own (hedge.go).
type call struct {
	req        *http.Request
	base       http.RoundTripper
	idempotent bool
	// unrepeatable says why the request can be sent only once ("" when it
	// can be sent again).
	unrepeatable string
	// The body: buffered (a copy of it), or the caller's GetBody, or a
	// prefix read while buffering followed by the rest of req.Body.
	buffered, prefix []byte
	hasBuffer        bool
	sentBody         bool // req.Body went to the transport, or was closed here
	// next is the body GetBody gave for the next attempt, read before the
	// budget is asked (prepare); nil when there is none.
	next io.ReadCloser

	hooks *hooks
	ctx   context.Context // the caller's, with the trace
	// With an Observer: parent is the operation's context (the caller's
	// otherwise, and nil), which hedges fork theirs from; actx is the
	// attempt's, c.ctx with the Observer's attempt in it, under which the
	// attempt is sent, its trace context injected in its header.
	parent, actx context.Context
	observer     Observer

	// The attempt in flight, or the one whose response is kept. The first
	// attempt's request and URL live here (one allocation for the call);
	// a later attempt's are new, since the transport may still read the
	// previous one's while it tears its connection down.
	first    http.Request
	firstURL url.URL
	out      *http.Request
	url      *url.URL
	cancel   context.CancelFunc // nil when the attempt has no context of its own
	res      *http.Response
	body     releasingBody

	// A hedged attempt runs as a call of its own, forked from the caller's
	// (fork): stop ends its context (a losing hedge is cancelled by it), and
	// its body is made before it is launched (given, givenLen).
	stop     context.CancelFunc
	given    io.ReadCloser
	givenLen int64
}

// canHedge reports whether the request may have attempts in flight side by
// side: it may be sent again once it may have reached the dependency, and
// its body can be sent again.
func (c *call) canHedge(key string) bool { return c.replaySafe(key) && c.unrepeatable == "" }

// fork makes the call of one hedged attempt, on the retry loop's goroutine:
// its own request, trace hooks and context (ended by stop, or by the
// caller's), with the body made here from the parent's (the caller's own
// the first time, a copy or GetBody's after). An error is the body's: the
// attempt cannot be sent.
func (c *call) fork(first bool) (*call, error) {
	body, length, err := c.newBody(first)
	if err != nil {
		return nil, err
	}
	f := &call{req: c.req, base: c.base, idempotent: c.idempotent, buffered: c.buffered, hasBuffer: c.hasBuffer,
		sentBody: true, given: body, givenLen: length, observer: c.observer}
	f.hooks = &hooks{call: f}
	f.hooks.trace = f.hooks.clientTrace()
	parent := c.parent
	if parent == nil {
		parent = c.req.Context()
	}
	var ctx context.Context
	ctx, f.stop = context.WithCancel(parent)
	f.ctx = httptrace.WithClientTrace(ctx, &f.hooks.trace)
	return f, nil
}

// adopt makes f's attempt the parent's: its response, if any, is the one
// kept, ended with f's context.
func (c *call) adopt(f *call) {
	c.res, c.cancel, c.out, c.url = f.res, f.cancel, f.out, f.url
}

// drop ends a forked attempt that is not kept: its context is cancelled,
// its response (if any) closed unread, and a body never sent closed.
func (f *call) drop() {
	f.discard()
	f.stop()
	if f.given != nil {
		_ = f.given.Close()
		f.given = nil
	}
}

// hooks are a call's httptrace hooks. They are pooled: the two hooks are
// closures, an allocation each per call otherwise. GetConn runs on the
// caller's goroutine, inside RoundTrip; WroteHeaders may run on the
// transport's, even late, so what it sets is atomic, and a late one from a
// previous call can only mark an attempt dispatched that was not, which
// makes the policy more careful, never less.
type hooks struct {
	trace  httptrace.ClientTrace
	call   *call
	pooled bool
	number atomic.Int32 // the attempt in flight
	wrote  atomic.Int32 // the last attempt whose headers were written
	got    atomic.Int32 // the last attempt for which the transport got a connection
	fresh  atomic.Bool  // that connection was new, not a kept-alive one
	conns  atomic.Int32 // connections the transport asked for in this attempt
	// refused: net/http tried to send this attempt's request again, and
	// was refused.
	refused atomic.Bool
}

var hookPool = sync.Pool{New: func() any {
	h := &hooks{pooled: true}
	h.trace = h.clientTrace()
	return h
}}

func (h *hooks) clientTrace() httptrace.ClientTrace {
	return httptrace.ClientTrace{GetConn: h.getConn, GotConn: h.gotConn, WroteHeaders: h.wroteHeaders}
}

// newHooks returns c's hooks. When ctx already carries a trace,
// WithClientTrace composes the two by rewriting ours, so those hooks are
// made for this call alone and never pooled.
func newHooks(ctx context.Context, c *call) *hooks {
	var h *hooks
	if httptrace.ContextClientTrace(ctx) == nil {
		h = hookPool.Get().(*hooks)
	} else {
		h = &hooks{}
		h.trace = h.clientTrace()
	}
	h.call = c
	h.wrote.Store(0)
	h.got.Store(0)
	return h
}

func (h *hooks) done() {
	h.call = nil
	if h.pooled {
		hookPool.Put(h)
	}
}

// keepBody makes the body sendable again without touching the caller's
// request: through GetBody when the caller set one, or from a copy of up to
// limit bytes. A longer body is sent once.
func (c *call) keepBody(limit int64) error {
	req := c.req
	switch {
	case req.Body == nil || req.Body == http.NoBody:
		c.sentBody = true
		return nil
	case req.GetBody != nil:
		return nil
	}
	// One byte past the bound says the body is longer; a bound of
	// math.MaxInt64 has no byte past it (and limit+1 would overflow to a
	// negative limit, which reads nothing).
	bound := min(limit, math.MaxInt64-1) + 1
	// A declared length is trusted for the first buffer only up to the
	// default bound (declaring one costs the caller nothing), and 0 with a
	// body is an unknown length (net/http's Request.ContentLength).
	size := req.ContentLength
	if size <= 0 || size > min(limit, DefaultMaxBufferedBody) {
		size = -1
	}
	buf, err := readAll(io.LimitReader(req.Body, bound), size)
	if err != nil {
		closeBody(req)
		c.sentBody = true
		return err
	}
	if int64(len(buf)) > limit {
		c.prefix = buf
		c.unrepeatable = fmt.Sprintf("the request body is larger than the %d-byte buffering bound, so it can be sent once", limit)
		return nil
	}
	closeBody(req)
	c.sentBody, c.hasBuffer, c.buffered = true, true, buf
	return nil
}

// readAll is io.ReadAll starting from a buffer of size+1 bytes when size,
// a body's declared length, is known (not negative): a body read whole
// then fills it without growing, and the spare byte meets io.EOF (or shows
// the body longer than declared), where io.ReadAll starts at 512 bytes and
// doubles.
func readAll(r io.Reader, size int64) ([]byte, error) {
	if size < 0 {
		return io.ReadAll(r)
	}
	b := make([]byte, 0, size+1)
	for {
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)] // as io.ReadAll grows
		}
	}
}

// replaySafe reports whether the request sent may be sent again after it
// may have reached the dependency: its method is idempotent, or it carries
// the rendered key (every attempt does when the policy has a template).
func (c *call) replaySafe(key string) bool { return c.idempotent || key != "" }

// newBody returns a body to send, and its length when known: the caller's
// own body the first time, a copy or GetBody's after.
func (c *call) newBody(first bool) (io.ReadCloser, int64, error) {
	req := c.req
	switch {
	case c.hasBuffer:
		if len(c.buffered) == 0 {
			return http.NoBody, 0, nil
		}
		return io.NopCloser(bytes.NewReader(c.buffered)), int64(len(c.buffered)), nil
	case req.Body == nil || req.Body == http.NoBody:
		return req.Body, 0, nil
	case first && c.prefix != nil:
		c.sentBody = true
		return struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(c.prefix), req.Body), req.Body}, req.ContentLength, nil
	case first:
		c.sentBody = true
		return req.Body, req.ContentLength, nil
	case c.next != nil:
		body := c.next
		c.next = nil
		return body, req.ContentLength, nil
	case req.GetBody != nil:
		body, err := req.GetBody()
		return body, req.ContentLength, err
	}
	return nil, 0, errors.New("retryguard: the request body cannot be sent again") // Decide never asks for it
}

// prepare readies the body of the next attempt before the executor asks
// the budget for it, and says why there can be none ("" when there can): a
// GetBody that fails ends the operation with that reason, the attempt that
// could not be sent neither counted nor paid for with a token.
func (c *call) prepare() string {
	if c.hasBuffer || c.req.GetBody == nil || c.next != nil {
		return ""
	}
	body, err := c.req.GetBody()
	if err != nil {
		return "the request body could not be re-read (GetBody: " + err.Error() + "), so it cannot be sent again"
	}
	c.next = body
	return ""
}

// attempt sends attempt a, bounded by limit when it is positive (its own
// context then ends when the caller is done with its response, at EOF or
// Close; at once when the attempt fails or its response is discarded).
// The executor's context is the caller's; c.ctx is it with the trace, and
// c.actx that with the Observer's attempt.
func (c *call) attempt(_ context.Context, a Attempt, limit time.Duration) error {
	ctx := c.ctx
	if c.actx != nil {
		ctx = c.actx
	}
	c.cancel = nil
	if limit > 0 {
		ctx, c.cancel = context.WithTimeout(ctx, limit)
	}
	var (
		body   io.ReadCloser
		length int64
		err    error
	)
	if c.stop != nil { // a forked attempt: its body is made, its context ends with stop
		body, length, c.given = c.given, c.givenLen, nil
		if stop, timeout := c.stop, c.cancel; timeout != nil {
			c.cancel = func() { timeout(); stop() }
		} else {
			c.cancel = stop
		}
	} else {
		body, length, err = c.newBody(a.Number == 1)
	}
	if err != nil {
		c.end()
		return NotDispatched(err)
	}
	out, u := &c.first, &c.firstURL
	if a.Number > 1 {
		out, u = new(http.Request), new(url.URL)
	}
	*out = *c.req.WithContext(ctx)
	*u = *c.req.URL
	if len(c.req.Trailer) > 0 && length > 0 {
		length = -1 // trailers travel only after a chunked body (RFC 9112, section 7.1.2)
	}
	out.URL, out.Body, out.ContentLength, out.GetBody = u, body, length, nil
	if c.hasBuffer || c.req.GetBody != nil {
		// net/http calls GetBody to send a request again by itself: resend
		// refuses once this attempt reached the dependency.
		out.GetBody = c.resend
	}
	if a.Key != "" || c.stop != nil || c.actx != nil {
		// Hedged attempts in flight side by side each own their header map,
		// and so does an observed attempt, its own trace context in it.
		out.Header = c.req.Header.Clone()
		if out.Header == nil {
			out.Header = http.Header{}
		}
		if a.Key != "" {
			out.Header.Set(a.Header, a.Key)
		}
		if c.actx != nil {
			c.observer.Inject(c.actx, out.Header)
		}
	}
	if err := c.ctx.Err(); err != nil {
		c.end()
		closeBody(out)            // no transport took it
		return NotDispatched(err) // the caller gave up before this attempt reached the transport
	}
	h := c.hooks
	h.number.Store(int32(a.Number))
	h.conns.Store(0)
	h.got.Store(0)
	h.refused.Store(false)
	c.out, c.url = out, u
	res, err := c.base.RoundTrip(out)
	if err != nil {
		live := ctx.Err() == nil // read before end, which ends the attempt's own context
		c.end()
		switch {
		case h.refused.Load():
			return &sent{err: fmt.Errorf("retryguard: the connection failed after the request was sent, "+
				"and net/http's own re-send of it was refused (%w): %w", io.ErrUnexpectedEOF, err)}
		case h.conns.Load() > 0 && h.got.Load() != int32(a.Number):
			// net/http's own trace: the transport asked for a connection for
			// this attempt and never got one (the dial, the proxy's CONNECT or
			// the TLS handshake failed), and it reports GotConn before it
			// writes a byte, over HTTP/1.1 and HTTP/2 alike (transport.go,
			// getConn; h2_bundle.go, RoundTripOpt): docs/runtime.md, "Proven
			// non-dispatch".
			return NotDispatched(err)
		case h.wrote.Load() == int32(a.Number) && h.fresh.Load() && refusedHandshake(err):
			// TLS 1.3 ends the client's handshake before the server has
			// checked the client's certificate, so the request is written
			// and the server's refusal arrives as an alert in its place, on a
			// new connection: the server never took the request (RFC 8446,
			// section 4.4.2.4).
			return NotDispatched(err)
		case h.wrote.Load() == int32(a.Number):
			return &sent{err: err}
		case live && h.got.Load() == int32(a.Number):
			// net/http's own trace: it got a connection for this attempt and
			// wrote not even its headers (WroteHeaders runs before they are
			// flushed), so not a byte of the request left.
			return NotDispatched(err)
		}
		// No proof from the trace: a Base that does not run the request's
		// httptrace hooks (a RoundTripper of its own) reports nothing, and
		// over HTTP/2 a RoundTrip whose context ended may return before the
		// headers it wrote are reported. Only the error's own evidence (a
		// dial error, a refused connection, a failed lookup) proves then.
		return err
	}
	res.Request = c.req
	c.res = res
	if res.StatusCode < 400 {
		return nil
	}
	return &StatusError{Code: res.StatusCode, RetryAfter: res.Header.Get("Retry-After")}
}

// end ends the attempt's own context, if it has one.
func (c *call) end() {
	if c.cancel != nil {
		c.cancel()
	}
}

// getConn is the GetConn hook: the transport asks for a connection for
// each send of the request. A second ask after this attempt's headers were
// written is net/http re-sending a request already sent, which it does for
// a body-less replayable request (transport.go, shouldRetryRequest) without
// calling GetBody. The call stops it.
func (h *hooks) getConn(string) {
	if c := h.call; c != nil && h.conns.Add(1) > 1 && h.wrote.Load() == h.number.Load() {
		h.refused.Store(true)
		c.stopResend()
	}
}

func (h *hooks) wroteHeaders() { h.wrote.Store(h.number.Load()) }

// gotConn is the GotConn hook; it runs on the caller's goroutine, inside
// RoundTrip.
func (h *hooks) gotConn(info httptrace.GotConnInfo) {
	h.fresh.Store(!info.Reused)
	h.got.Store(h.number.Load())
}

// stopResend stops net/http's re-send of the attempt in flight before a
// byte of it is written, and ends the transport's loop, from the GetConn
// hook (on the caller's goroutine, after the previous send's write loop
// has finished: mapRoundTripError waits for it). A URL with a control
// character fails Request.write (and HTTP/2's :path check) before anything
// reaches the connection; a body that net/http cannot rewind then makes
// the failed send one it does not retry (shouldRetryRequest: a request
// with a body and no GetBody).
func (c *call) stopResend() {
	*c.url = url.URL{Opaque: "\x7f"}
	c.out.Body, c.out.ContentLength = refusedBody{}, 1
}

// refusedBody is the body of a send that is stopped before it is written.
type refusedBody struct{}

func (refusedBody) Read([]byte) (int, error) { return 0, io.EOF }
func (refusedBody) Close() error             { return nil }

// resend is the outgoing request's GetBody: net/http calls it to send the
// request again by itself after the connection failed. Before this attempt
// reached the dependency that is a send of a request that never left;
// after, it is a retry the policy did not make, and is refused.
func (c *call) resend() (io.ReadCloser, error) {
	if h := c.hooks; h.wrote.Load() == h.number.Load() {
		h.refused.Store(true)
		return nil, errResendRefused
	}
	body, _, err := c.newBody(false)
	return body, err
}

var errResendRefused = errors.New("retryguard: net/http's own re-send of a request already sent is refused; the policy decides on any retry")

// discard ends the kept response's attempt at once and drops the response
// unread (issue 18: "Discarded attempts are cancelled at once"): a retry
// does not wait on the body of the answer it retries past, however slowly
// it comes. Its connection is not reused; a retry is rare enough to pay for
// a new one.
func (c *call) discard() {
	c.end()
	if c.res != nil {
		_ = c.res.Body.Close()
		c.res = nil
	}
}

// deliver hands the kept response to the caller; its attempt's context ends
// when the caller closes the body or reads it to the end. A 101 Switching
// Protocols response is handed over as it is: its body is the connection, an
// io.ReadWriteCloser (net/http's RoundTripper contract), which the caller
// owns from now on. Its attempt ends at once, so that the attempt's timer
// can never reach that connection; net/http itself ends the request's
// context once it hands the connection over (transport.go, readLoop).
func (c *call) deliver() *http.Response {
	if c.res.StatusCode == http.StatusSwitchingProtocols {
		c.end()
		return c.res
	}
	if c.cancel == nil {
		return c.res // no context of its own to end
	}
	c.body = releasingBody{ReadCloser: c.res.Body, release: c.cancel}
	c.res.Body = &c.body
	return c.res
}

// releasingBody ends its attempt's context and timer once the caller is
// done: at EOF (or any read error) or Close, and never before.
type releasingBody struct {
	io.ReadCloser
	release context.CancelFunc
}

func (b *releasingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.release()
	}
	return n, err
}

func (b *releasingBody) Close() error {
	err := b.ReadCloser.Close()
	b.release()
	return err
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}
