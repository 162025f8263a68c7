package proxy

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retryguard/retryguard/contract/codes"
	"github.com/retryguard/retryguard/contract/httprules"
	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/runtime/budget"
	"github.com/retryguard/retryguard/runtime/retry"
)

// VarHeaderPrefix starts the request headers a key template's variables are
// taken from: {user_id} is read from Retryguard-Var-User-Id (every "_" of
// the name a "-", matched without regard to case). The proxy removes every
// such header before the request leaves the pod.
const VarHeaderPrefix = "Retryguard-Var-"

// The headers of a problem the proxy answers with, so that a client that
// reads no body (busybox wget, curl -f) still sees why.
const (
	CodeHeader     = "Retryguard-Code"
	StateHeader    = "Retryguard-State"
	AttemptsHeader = "Retryguard-Attempts"
)

// LetterHeader tells the application that its operation's dead letter was
// not kept (LetterDropped): it is not reconciled from the journal, and the
// application must keep what it needs itself. The sidecar sets it on its
// answer, and removes it from any other answer, so that an upstream cannot
// claim it.
const (
	LetterHeader  = "Retryguard-Letter"
	LetterDropped = "dropped"
)

// callerKey is the variable that carries a caller's own idempotency key
// through the keyed executor's template (see keyedSource).
const callerKey = "caller_idempotency_key"

// Proxy serves the routes of one local port. Each request is one logical
// operation of the route's policy, sent through retry.RoundTripper, so every
// rule of the Go runtime applies to it unchanged (docs/runtime.md). It is
// safe for concurrent use.
type Proxy struct {
	src    retry.Source
	routes []*route // longest prefix first
}

type route struct {
	Route
	upstream *url.URL
	// inFlight holds a token for each request the route is serving.
	inFlight chan struct{}
	// transports[keyed][pooled]: keyed for a request that carries its own
	// key (else the policy's template renders it from Retryguard-Var-*
	// headers), pooled for a policy that names a connection pool (else the
	// runtime's base transport).
	transports [2][2]*retry.RoundTripper
	names      atomic.Pointer[placeholders]
}

// placeholders are a payload's key template's variables and their headers.
type placeholders struct {
	payload *policyconfig.Payload
	vars    []string // variable names
	headers []string // their canonical header names
}

// DefaultMaxInFlight is the most requests a route serves at once when
// Runtime.MaxInFlight is 0. Each holds up to a request body the
// RoundTripper keeps to send again (retry.DefaultMaxBufferedBody) and a copy
// buffer: 256 of them stay within a few tens of MiB, inside the injected
// sidecar's memory limit, however many connections the application opens.
const DefaultMaxInFlight = 256

// Transport returns the transport a route's upstream is reached through
// when its policy names no connection pool: http.DefaultTransport's
// settings, but keeping an idle connection for each request a route may
// serve at once (DefaultMaxInFlight). http.DefaultTransport keeps 2 a host,
// so under more concurrent requests than that a proxy on it closes a
// connection after nearly every answer and dials a new one for the next
// request (httputil.ReverseProxy's default does; docs/benchmarks.md).
func Transport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns, t.MaxIdleConnsPerHost = 0, DefaultMaxInFlight // 0: the per-host bound and IdleConnTimeout alone
	return t
}

// Runtime is what the routes of every port share: the two executors (see
// NewRuntime), the pools, the base transport and the source.
type Runtime struct {
	src           retry.Source
	plain, caller *retry.Executor
	pools         *retry.Pools
	base          http.RoundTripper
	// MaxInFlight bounds the requests each route serves at once; one
	// beyond it is answered 503 ERR_PROXY_BUSY at once. 0 means
	// DefaultMaxInFlight.
	MaxInFlight int
}

// NewRuntime builds the executors the proxy's routes run on. The second
// serves a policy with a key template under its own name, its template
// replaced by the caller's key; both take the same options (pass one budget
// registry, dead-letter sink, event sink and metrics), so a request counts
// once in the pod's share whichever carries its key. A policy that names a
// connection pool is sent through pools; any other through base
// (Transport() when nil).
func NewRuntime(src retry.Source, pools *retry.Pools, base http.RoundTripper, opts ...retry.Option) *Runtime {
	if base == nil {
		base = Transport()
	}
	keyed := &keyedSource{Source: src}
	return &Runtime{src: src, plain: retry.New(src, opts...), caller: retry.New(keyed, opts...), pools: pools, base: base}
}

// Budget is the retry budget the named policy draws on in this pod, shared by
// both executors (see NewRuntime).
func (rt *Runtime) Budget(policy string) (*budget.Budget, bool) { return rt.plain.Budget(policy) }

// New returns the proxy for one port's routes of t (every route when port
// is 0).
func (rt *Runtime) New(t *Table, port int) (*Proxy, error) {
	p := &Proxy{src: rt.src}
	for _, r := range t.Routes {
		if port != 0 && r.Port != port {
			continue
		}
		u, err := upstreamURL(r.Upstream)
		if err != nil {
			return nil, err
		}
		limit := rt.MaxInFlight
		if limit <= 0 {
			limit = DefaultMaxInFlight
		}
		ro := &route{Route: r, upstream: u, inFlight: make(chan struct{}, limit)}
		for keyed, ex := range []*retry.Executor{rt.plain, rt.caller} {
			ro.transports[keyed][0] = &retry.RoundTripper{Executor: ex, Policy: r.Policy, Base: rt.base}
			ro.transports[keyed][1] = &retry.RoundTripper{Executor: ex, Policy: r.Policy, Pools: rt.pools}
		}
		p.routes = append(p.routes, ro)
	}
	sort.SliceStable(p.routes, func(i, j int) bool { return len(p.routes[i].PathPrefix) > len(p.routes[j].PathPrefix) })
	return p, nil
}

// match returns the route of the longest prefix that covers path, segment by
// segment.
func (p *Proxy) match(path string) *route {
	for _, r := range p.routes {
		pre := r.PathPrefix
		if strings.HasPrefix(path, pre) && (strings.HasSuffix(pre, "/") || len(path) == len(pre) || path[len(pre)] == '/') {
			return r
		}
	}
	return nil
}

// hopHeaders are RFC 9110's connection-specific fields, never forwarded
// (net/http/httputil's list).
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func removeHop(h http.Header) {
	for _, f := range h.Values("Connection") {
		for _, name := range strings.Split(f, ",") {
			if name = textproto(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range hopHeaders {
		h.Del(name)
	}
}

func textproto(s string) string { return http.CanonicalHeaderKey(strings.TrimSpace(s)) }

// ServeHTTP sends r to its route's upstream under the route's policy and
// answers with the dependency's response, or with a problem (RFC 9457)
// carrying the code: 504 for ERR_DEADLINE_EXCEEDED, 202 for an outcome that
// is unknown (the runtime's rendering: it is reconciled from its dead letter,
// never reported as a failure), 400 for a request the key cannot be
// rendered from, 502 for a TLS handshake that failed, and 503 for every
// other stop. A body that fails part way aborts the answer.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if status, why := unroutable(r); why != "" {
		writeProblem(w, status, &retry.Error{Code: codes.UnroutableRequest, Detail: why})
		return
	}
	rt := p.match(r.URL.Path)
	if rt == nil {
		writeProblem(w, http.StatusNotFound, &retry.Error{Code: codes.NoRoute, Detail: "no route of this port matches " + strconv.Quote(r.URL.Path)})
		return
	}
	select {
	case rt.inFlight <- struct{}{}:
		defer func() { <-rt.inFlight }()
	default:
		w.Header().Set("Retry-After", "1")
		writeProblem(w, http.StatusServiceUnavailable, &retry.Error{Code: codes.ProxyBusy,
			Detail: fmt.Sprintf("the route %s already serves its %d requests at once; nothing was sent", strconv.Quote(rt.PathPrefix), cap(rt.inFlight))})
		return
	}
	keyed, pooled := 0, 0
	ctx := r.Context()
	payload, known := p.src.Policy(rt.Policy)
	if known && payload.Policy.ConnectionPool != nil {
		pooled = 1
	}
	if known && payload.Policy.KeyTemplate != "" {
		if key := r.Header.Get(payload.Policy.IdempotencyHeader); key != "" && payload.Policy.IdempotencyHeader != "" {
			// The caller's own key is the operation's key (docs/proxy.md).
			keyed = 1
			ctx = retry.WithVars(ctx, retry.Vars{callerKey: key})
		} else {
			ctx = retry.WithVars(ctx, rt.vars(payload, r.Header))
		}
	}
	out := r.Clone(ctx) // one copy of the request, its context already the operation's
	out.RequestURI = ""
	// The request's trailers arrive as its body ends, in r.Trailer's map:
	// the clone's copy of it would stay empty.
	out.Trailer = r.Trailer
	u := out.URL // the clone's own
	*u = *rt.upstream
	u.Path = rt.upstream.Path + r.URL.Path
	u.RawPath = ""
	if r.URL.RawPath != "" {
		u.RawPath = rt.upstream.EscapedPath() + r.URL.RawPath
	}
	u.RawQuery = r.URL.RawQuery
	out.Host = ""
	removeHop(out.Header)
	if r.ContentLength == 0 {
		out.Body = nil // no body to buffer or send
	}
	for name := range out.Header {
		if len(name) > len(VarHeaderPrefix) && strings.EqualFold(name[:len(VarHeaderPrefix)], VarHeaderPrefix) {
			delete(out.Header, name)
		}
	}
	res, err := rt.transports[keyed][pooled].RoundTrip(out)
	if err != nil {
		var re *retry.Error
		if errors.As(err, &re) {
			writeProblem(w, statusOf(re), re)
			return
		}
		// Only reading the application's own body fails otherwise, before
		// anything was sent upstream.
		http.Error(w, "retryguard-proxy: "+err.Error(), http.StatusBadRequest)
		return
	}
	defer res.Body.Close()
	removeHop(res.Header)
	h := w.Header()
	for k, v := range res.Header {
		if !reserved(k) { // the proxy's own words, which the dependency cannot speak for it
			h[k] = v
		}
	}
	// The transport's response names its trailers in res.Trailer, not in a
	// Trailer header: announce them, then send them after the body
	// (httputil.ReverseProxy does the same).
	announced := len(res.Trailer)
	if announced > 0 {
		names := make([]string, 0, announced)
		for k := range res.Trailer {
			names = append(names, k)
		}
		h.Set("Trailer", strings.Join(names, ", "))
	}
	w.WriteHeader(res.StatusCode)
	if err := copyBody(w, res.Body); err != nil {
		// The dependency's body failed part way (cut, reset, or the
		// deadline): abort the answer so that the application reads a broken
		// body, as it would from the dependency itself, never a short one
		// that looks complete. net/http closes an HTTP/1.1 connection
		// without the terminating chunk (or short of Content-Length) and
		// resets an HTTP/2 stream (ErrAbortHandler, as ReverseProxy does).
		panic(http.ErrAbortHandler)
	}
	for k, vv := range res.Trailer {
		if len(res.Trailer) != announced {
			k = http.TrailerPrefix + k // one the dependency did not announce
		}
		h[k] = vv
	}
}

// ReservedHeaderPrefix starts every header the proxy itself answers with
// (CodeHeader, StateHeader, AttemptsHeader) or reads (VarHeaderPrefix): the
// dependency's own are removed from its answer.
const ReservedHeaderPrefix = "Retryguard-"

func reserved(name string) bool {
	return len(name) >= len(ReservedHeaderPrefix) && strings.EqualFold(name[:len(ReservedHeaderPrefix)], ReservedHeaderPrefix)
}

// unroutable says why r is refused before any route is matched ("" when it
// is not), and with what status. A route is chosen by the path as sent,
// while a dependency may read it normalized: a path with a dot-segment
// ("/x/../v1", "%2e%2e") or an encoded separator ("%2F", "%5C") could run
// under one route's policy and be served as another's path, so it is
// refused, as is what is no request to route at all: CONNECT, and a
// protocol upgrade (docs/proxy.md, "What the proxy refuses").
func unroutable(r *http.Request) (int, string) {
	switch {
	case r.Method == http.MethodConnect:
		return http.StatusMethodNotAllowed, "CONNECT is not proxied: send plain HTTP to the route's port"
	case r.Header.Get("Upgrade") != "" && !strings.EqualFold(r.Header.Get("Upgrade"), "h2c"):
		return http.StatusBadRequest, "a protocol upgrade (" + strconv.Quote(r.Header.Get("Upgrade")) + ") is not proxied"
	}
	for seg := range strings.SplitSeq(r.URL.Path, "/") {
		if seg == "." || seg == ".." {
			return http.StatusBadRequest, "the path " + strconv.Quote(r.URL.EscapedPath()) + " has a dot-segment; send the path it means"
		}
	}
	if raw := strings.ToUpper(r.URL.RawPath); strings.Contains(raw, "%2F") || strings.Contains(raw, "%5C") || strings.Contains(r.URL.Path, "\\") {
		return http.StatusBadRequest, "the path " + strconv.Quote(r.URL.EscapedPath()) + " has an encoded or backslash separator"
	}
	return 0, ""
}

// vars reads the template's variables from the request's Retryguard-Var-*
// headers; one that is absent or empty is missing, and the runtime refuses
// the operation before any attempt (ERR_MISSING_KEY_VARIABLE).
func (rt *route) vars(payload *policyconfig.Payload, h http.Header) retry.Vars {
	ph := rt.names.Load()
	if ph == nil || ph.payload != payload {
		ph = &placeholders{payload: payload}
		for _, name := range httprules.KeyTemplatePlaceholders(payload.Policy.KeyTemplate) {
			ph.vars = append(ph.vars, name)
			ph.headers = append(ph.headers, VarHeader(name))
		}
		rt.names.Store(ph)
	}
	vars := make(retry.Vars, len(ph.vars))
	for i, name := range ph.vars {
		if v := h.Get(ph.headers[i]); v != "" {
			vars[name] = v
		}
	}
	return vars
}

// VarHeader is the request header a key template's variable is read from.
func VarHeader(name string) string {
	return http.CanonicalHeaderKey(VarHeaderPrefix + strings.ReplaceAll(name, "_", "-"))
}

var copyBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// copyBody streams the dependency's body to the application, flushing after
// every read so that a streamed answer is not held back. It returns the
// body's read error (nil at its end); a write error is the application's
// own connection, gone, and ends the copy quietly.
func copyBody(w http.ResponseWriter, body io.Reader) error {
	buf := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(buf)
	rc := http.NewResponseController(w)
	for {
		n, err := body.Read(*buf)
		if n > 0 {
			if _, werr := w.Write((*buf)[:n]); werr != nil {
				return nil
			}
			if err == nil {
				_ = rc.Flush()
			}
		}
		switch {
		case err == io.EOF:
			return nil
		case err != nil:
			return err
		}
	}
}

// statusOf is the status the application receives for an operation that did
// not complete (see ServeHTTP).
func statusOf(e *retry.Error) int {
	switch {
	case e.State == retry.UnknownOutcome:
		return e.Problem().Status
	case e.Code == codes.DeadlineExceeded:
		return http.StatusGatewayTimeout
	case e.Last.Class == retry.Permanent && e.Last.Status == 0:
		return http.StatusBadGateway // no answer could be had: a TLS handshake that failed
	case e.State == "" && (e.Code == codes.MissingKeyVariable || e.Code == codes.InvalidKeyTemplate):
		return http.StatusBadRequest
	}
	return http.StatusServiceUnavailable
}

// Problem is the runtime's RFC 9457 problem with the extension members a
// client of the proxy needs: the lifecycle state and the attempts made.
type Problem struct {
	httprules.Problem
	State    retry.State `json:"state,omitempty"`
	Attempts int         `json:"attempts"`
	Policy   string      `json:"policy,omitempty"`
}

func writeProblem(w http.ResponseWriter, status int, e *retry.Error) {
	p := Problem{Problem: e.Problem(), State: e.State, Attempts: e.Attempts, Policy: e.Policy}
	p.Status = status
	if e.Policy == "" {
		p.Detail = e.Code.Message(e.Detail) // the proxy's own refusal: no policy, no attempt
	}
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set(CodeHeader, string(e.Code))
	if e.State != "" {
		h.Set(StateHeader, string(e.State))
	}
	h.Set(AttemptsHeader, strconv.Itoa(e.Attempts))
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(p)
}

// keyedSource serves each policy with a key template under its own name,
// the template replaced by the caller's key ({caller_idempotency_key}), so
// that the runtime sends the caller's key on every attempt and treats the
// request as keyed. Everything else, the budget included, is the payload's.
type keyedSource struct {
	retry.Source
	derived sync.Map // name → *derivedPayload
}

type derivedPayload struct{ from, to *policyconfig.Payload }

func (k *keyedSource) Policy(name string) (*policyconfig.Payload, bool) {
	p, ok := k.Source.Policy(name)
	if !ok || p.Policy.KeyTemplate == "" {
		return p, ok
	}
	if d, hit := k.derived.Load(name); hit && d.(*derivedPayload).from == p {
		return d.(*derivedPayload).to, true // the same pointer, so the executor's compiled policy stays
	}
	to := *p
	to.Policy.KeyTemplate = "{" + callerKey + "}"
	k.derived.Store(name, &derivedPayload{from: p, to: &to})
	return &to, true
}

// DeliveryBound is the wrapped source's, so that a fleet budget's share is
// the same through either executor.
func (k *keyedSource) DeliveryBound() time.Duration {
	if d, ok := k.Source.(interface{ DeliveryBound() time.Duration }); ok {
		return d.DeliveryBound()
	}
	return 1<<63 - 1
}
