package retry

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/retryguard/retryguard/contract/limits"
)

// Class is what an attempt's evidence says about retrying it.
type Class string

const (
	// classSuccess: the operation completed (a metrics label, never evidence).
	classSuccess Class = "success"
	// Transient: a listed failure that proves the request was not applied,
	// or a listed status: another attempt may succeed.
	Transient Class = "transient"
	// Ambiguous: a listed transport failure after the request may have been
	// applied; another attempt is safe only under an idempotency guarantee.
	Ambiguous Class = "ambiguous"
	// Permanent: a failure retrying cannot fix (a 4xx other than 429).
	Permanent Class = "permanent"
	// Unrecognized: evidence the policy does not list; terminal.
	Unrecognized Class = "unrecognized"
)

// Evidence is what one attempt showed, the basis of every decision.
type Evidence struct {
	Class Class `json:"class"`
	// Status is the HTTP status, when there was one.
	Status int `json:"status,omitempty"`
	// Transport names the transport failure, when there was one.
	Transport string `json:"transport,omitempty"`
	// Dispatched is false only with proof the request never reached the
	// dependency (refused, DNS, a dial that failed, or NotDispatched).
	Dispatched bool `json:"dispatched"`
	// RetryAfter is a valid server delay (0 for a date already past).
	// RetryAfterUnparseable says a Retry-After was sent that is neither
	// delta-seconds nor an HTTP-date: a terminal failure (MC-FM-01).
	RetryAfter            time.Duration `json:"retryAfter,omitempty"`
	RetryAfterUnparseable bool          `json:"retryAfterUnparseable,omitempty"`
}

// StatusError is how an operation reports an HTTP status that is not a
// success. The RoundTripper returns it for every response it classifies.
type StatusError struct {
	Code int
	// RetryAfter is the raw Retry-After header, if any.
	RetryAfter string
	// Delay is a server delay that a protocol states as a duration rather
	// than a header (gRPC's grpc-retry-pushback-ms); it is used when
	// RetryAfter is empty.
	Delay time.Duration
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("HTTP %d %s", e.Code, http.StatusText(e.Code))
}

// Status reports an HTTP status from an operation.
func Status(code int, retryAfter string) error {
	return &StatusError{Code: code, RetryAfter: retryAfter}
}

type notDispatched struct{ err error }

func (e *notDispatched) Error() string { return e.err.Error() }
func (e *notDispatched) Unwrap() error { return e.err }

// NotDispatched marks err as proof that the request never reached the
// dependency (for example, nothing was written to the connection). Only
// such proof makes a reset or a timeout safe to retry without a key.
func NotDispatched(err error) error { return &notDispatched{err: err} }

// final is an attempt's error after which the operation can send no other.
type final struct {
	err error
	why string
}

func (e *final) Error() string { return e.err.Error() }
func (e *final) Unwrap() error { return e.err }

// Final marks err as the error of the last attempt the operation can make,
// why saying why (grpc-go already retried the call by itself, say). Do then
// stops as it stops on a request it cannot send again: no budget asked, no
// backoff, no attempt added, and the evidence is err's own, so a status in it
// still reaches the caller.
func Final(err error, why string) error { return &final{err: err, why: why} }

// finalOf is why err ends its operation ("" when it does not).
func finalOf(err error) string {
	var f *final
	if errors.As(err, &f) {
		return f.why
	}
	return ""
}

// sent marks an error that ended an attempt whose request headers had been
// written: the attempt is dispatched whatever the error says, even a refused
// connection (net/http's own re-send of a request already sent can be
// refused; the first send still reached the dependency).
type sent struct{ err error }

func (e *sent) Error() string { return e.err.Error() }
func (e *sent) Unwrap() error { return e.err }

// clientResent marks as dispatched an error of Do's operation that
// net/http's http.Client returned (a *url.Error) for a request it may have
// sent and then sent again by itself: when a reused keep-alive connection
// fails after the request was written, net/http re-sends a request it deems
// replayable (GET, HEAD, OPTIONS, TRACE, or one with an Idempotency-Key
// header; transport.go, shouldRetryRequest) on a new connection, and returns
// only that re-send's error. A refused connection or a failed lookup is then
// no proof that nothing left. Do cannot see the request, so any key counts
// as one net/http may replay. The RoundTripper sees each send itself
// (through its trace), and is not marked (viaDo false).
func clientResent(err error, viaDo, keyed bool) error {
	var ue *url.Error
	var nd *notDispatched
	if !viaDo || !errors.As(err, &ue) || errors.As(err, &nd) {
		return err // not http.Client's, or the operation's own proof
	}
	switch ue.Op {
	case "Get", "Head", "Options", "Trace": // url.Error's Op is the method, so spelled
	default:
		if !keyed {
			return err // a keyless POST, PUT, PATCH, DELETE: net/http never re-sends it
		}
	}
	return &sent{err: err}
}

// classify turns an attempt's error into evidence under a policy.
// Decisions rest on types and errno values, never on message text.
func classify(err error, retryOnStatus func(int) bool, retryOnErr func(string) bool, now time.Time) Evidence {
	var se *StatusError
	if errors.As(err, &se) {
		ev := Evidence{Status: se.Code, Dispatched: true}
		switch {
		case se.Code >= 400 && se.Code < 500 && se.Code != http.StatusTooManyRequests:
			ev.Class = Permanent // INV-RTY-03, whatever a payload lists
		case gatewayFailure(se.Code) && retryOnStatus(se.Code):
			// A gateway that gave up waiting for the upstream (504), or that
			// got no valid answer from it (502), does not know whether the
			// upstream applied the request: ambiguous (docs/runtime.md, "504").
			ev.Class = Ambiguous
		case retryOnStatus(se.Code):
			ev.Class = Transient
		default:
			ev.Class = Unrecognized
		}
		switch {
		case se.RetryAfter != "":
			if d, ok := parseRetryAfter(se.RetryAfter, now); ok {
				ev.RetryAfter = d
			} else {
				ev.RetryAfterUnparseable = true
			}
		case se.Delay < 0:
			ev.RetryAfterUnparseable = true // a negative delay means "do not retry" (gRPC A6)
		case se.Delay > 0:
			ev.RetryAfter = min(se.Delay, maxRetryAfter)
		}
		return ev
	}
	transport, dispatched := transportOf(err)
	ev := Evidence{Transport: transport, Dispatched: dispatched}
	switch {
	case !dispatched && tlsName(transport):
		ev.Class = Permanent // a retry cannot fix a certificate, or a server that does not speak TLS
	case transport == "" || !retryOnErr(transport):
		ev.Class = Unrecognized
	case dispatched:
		ev.Class = Ambiguous
	default:
		ev.Class = Transient
	}
	return ev
}

// mayHaveApplied reports whether an attempt's evidence leaves open that the
// dependency applied the request: an ambiguous failure, or an unlisted
// failure after the request may have been dispatched: any error without a
// status, named or not (a malformed response, an HTTP/2 stream reset, the
// caller's own cancel), or a 502 or 504. Once one attempt of an operation may
// have been applied, the operation's outcome is unknown until a later
// attempt succeeds (Decide's MayHaveApplied; RG-LOAD: "an uncertain local
// outcome must trigger reconciliation, not an invented failure").
func mayHaveApplied(ev Evidence) bool {
	return ev.Class == Ambiguous ||
		ev.Class == Unrecognized && ev.Dispatched && (ev.Status == 0 || gatewayFailure(ev.Status))
}

// gatewayFailure reports whether a status is a gateway's that cannot say
// whether the upstream applied the request: 502 Bad Gateway (the upstream's
// answer was lost or invalid) and 504 Gateway Timeout (docs/runtime.md, "504").
func gatewayFailure(code int) bool {
	return code == http.StatusGatewayTimeout || code == http.StatusBadGateway
}

// transportOf names a transport failure and whether the request may have
// been dispatched. It is the one rule of proven non-dispatch (docs/runtime.md,
// "Proven non-dispatch"): a failure before any byte of the request was
// written is not dispatched, proven by the error itself (a failed lookup, a
// refused connection, a failed dial, a proxy that refused CONNECT, a
// certificate that did not verify) or by the integration that saw the
// attempt and wrapped the error with NotDispatched (the RoundTripper's
// trace, the gRPC stats handler). Nothing else proves it.
func transportOf(err error) (string, bool) {
	var nd *notDispatched
	proven := errors.As(err, &nd)
	var wrote *sent
	if errors.As(err, &wrote) {
		name, _ := transportOf(wrote.err)
		return name, true
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return limits.DNSFailure, false
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return limits.ConnectionRefused, false
	}
	var op *net.OpError
	if errors.As(err, &op) && (op.Op == "dial" || op.Op == "proxyconnect") {
		// Nothing is sent before the connection exists, and net/http's
		// "proxyconnect" is the CONNECT (or the TLS to the proxy) that
		// would have carried it (transport.go, dialConn).
		proven = true
	}
	if name, proof := tlsFailure(err); name != "" {
		return name, !proven && !proof
	}
	switch {
	case errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNABORTED),
		// The peer closed the connection: before the request was written
		// it is proven harmless, after it the request may have been applied.
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return limits.ConnectionReset, !proven
	case isTimeout(err):
		return limits.Timeout, !proven
	}
	return "", !proven
}

// tlsName reports whether a transport failure is the TLS handshake's.
func tlsName(name string) bool { return name == limits.TLSCertificate || name == limits.TLSHandshake }

// tlsFailure names a failure of the TLS handshake ("" when err is none),
// and whether err alone proves that nothing was sent. A certificate that
// did not verify is only ever the client handshake's error; an alert from
// the server or a record that is not TLS can also end a connection that
// carried a request, so they prove nothing without the attempt's trace.
func tlsFailure(err error) (name string, proof bool) {
	var (
		verify    *tls.CertificateVerificationError
		authority x509.UnknownAuthorityError
		host      x509.HostnameError
		invalid   x509.CertificateInvalidError
		record    tls.RecordHeaderError
	)
	switch {
	case errors.As(err, &verify), errors.As(err, &authority), errors.As(err, &host), errors.As(err, &invalid):
		return limits.TLSCertificate, true
	case errors.Is(err, http.ErrSchemeMismatch):
		return limits.TLSHandshake, true // http.Client's name for the handshake's plain HTTP answer
	case errors.As(err, &record):
		return limits.TLSHandshake, false // an answer that is not TLS: http:// behind https://
	}
	switch a, ok := tlsAlert(err); {
	case !ok:
		return "", false
	case certificateAlert(a):
		return limits.TLSCertificate, false
	case handshakeAlert(a):
		return limits.TLSHandshake, false
	}
	return "", false
}

// refusedHandshake reports whether err is a server's alert that refuses the
// handshake (a certificate alert or a handshake alert).
func refusedHandshake(err error) bool {
	a, ok := tlsAlert(err)
	return ok && (certificateAlert(a) || handshakeAlert(a))
}

// tlsAlert is the alert a TLS peer sent, when err is crypto/tls's report of
// one: a *net.OpError whose Op is "remote error" and whose Err is the
// package's alert, a uint8 (crypto/tls conn.go, readRecordOrCCS).
func tlsAlert(err error) (uint8, bool) {
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "remote error" || op.Err == nil {
		return 0, false
	}
	v := reflect.ValueOf(op.Err)
	if v.Type().PkgPath() != "crypto/tls" || v.Kind() != reflect.Uint8 {
		return 0, false
	}
	return uint8(v.Uint()), true
}

// certificateAlert reports the alerts by which a server refuses the
// client's certificate or its absence (RFC 8446, section 6.2): bad,
// unsupported, revoked, expired or unknown certificate, unknown CA, access
// denied, certificate required.
func certificateAlert(a uint8) bool {
	switch a {
	case 42, 43, 44, 45, 46, 48, 49, 116:
		return true
	}
	return false
}

// handshakeAlert reports the other alerts that end a handshake: handshake
// failure, protocol version, insufficient security, unrecognized name, no
// application protocol (RFC 8446, section 6.2).
func handshakeAlert(a uint8) bool {
	switch a {
	case 40, 70, 71, 112, 120:
		return true
	}
	return false
}

func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, syscall.ETIMEDOUT) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// maxRetryAfter bounds a parsed delay (delta-seconds or a date decades
// away) so that it cannot overflow; any delay this long is far beyond every
// retryAfter.maxDelay.
const maxRetryAfter = 1 << 31 * time.Second

// parseRetryAfter reads RFC 9110's Retry-After: delta-seconds (digits only)
// or an HTTP-date. A date already past is a delay of 0. Anything else
// (a sign, a fraction, a word, blanks) does not parse.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v != "" && strings.Trim(v, "0123456789") == "" {
		secs, err := strconv.ParseInt(v, 10, 64)
		if err != nil || time.Duration(secs) > maxRetryAfter/time.Second {
			return maxRetryAfter, true // digits too many to represent: a very long delay
		}
		return time.Duration(secs) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return min(max(t.Sub(now), 0), maxRetryAfter), true
}
