package retry

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"

	"github.com/retryguard/retryguard/runtime/codes"
)

type varsKey struct{}

// WithVars attaches the key template's variables to a request's context.
func WithVars(ctx context.Context, vars Vars) context.Context {
	return context.WithValue(ctx, varsKey{}, vars)
}

// RoundTripper runs each request as one logical operation under Policy:
// every attempt carries the same idempotency header, responses are
// classified by status, and Retry-After is honoured. It is safe for
// concurrent use.
//
// A success, or a permanent status (a 4xx the caller must see), returns the
// response. Anything else that did not complete returns an *Error.
type RoundTripper struct {
	Executor *Executor
	Policy   string
	// Base sends each attempt. When nil, the policy's connection pool from
	// Pools is used, or http.DefaultTransport for a policy without one.
	Base  http.RoundTripper
	Pools *Pools
}

// RoundTrip implements http.RoundTripper.
func (rt *RoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	base, err := rt.base()
	if err != nil {
		return nil, err
	}
	if req.Body != nil && req.Body != http.NoBody && req.GetBody == nil {
		// Buffer once so that every attempt can send the same body.
		body, err := io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, err
		}
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		req.Body, _ = req.GetBody()
	}
	vars, _ := req.Context().Value(varsKey{}).(Vars)
	var last *http.Response
	err = rt.Executor.Do(req.Context(), rt.Policy, vars, func(ctx context.Context, a Attempt) error {
		discard(last)
		last = nil
		r := req.Clone(ctx)
		if a.Number > 1 && req.GetBody != nil {
			body, err := req.GetBody()
			if err != nil {
				return err
			}
			r.Body = body
		}
		if a.Key != "" {
			r.Header.Set(a.Header, a.Key)
		}
		var wroteHeaders atomic.Bool
		r = r.WithContext(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
			WroteHeaders: func() { wroteHeaders.Store(true) },
		}))
		res, err := base.RoundTrip(r)
		if err != nil {
			if !wroteHeaders.Load() {
				return NotDispatched(err) // not a byte of the request left
			}
			return err
		}
		last = res
		if res.StatusCode < 400 {
			return nil
		}
		return &StatusError{Code: res.StatusCode, RetryAfter: res.Header.Get("Retry-After")}
	})
	if err == nil {
		return last, nil
	}
	var re *Error
	if errors.As(err, &re) && re.Code == codes.PermanentFailure && last != nil {
		return last, nil // the dependency's own answer, for the caller to read
	}
	discard(last)
	return nil, err
}

func (rt *RoundTripper) base() (http.RoundTripper, error) {
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

// discard drains a little of a response body so its connection can be
// reused, and closes it.
func discard(res *http.Response) {
	if res == nil {
		return
	}
	_, _ = io.CopyN(io.Discard, res.Body, 64<<10)
	_ = res.Body.Close()
}
