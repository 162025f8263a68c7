package retrygrpc

import (
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
)

// grpc-retry-pushback-ms is read as gRPC A6 says: exactly one value of
// digits only, a delay of that many milliseconds; anything else, including
// a number too large for 31 bits, is "do not retry" (-1). Never a panic.
func FuzzPushback(f *testing.F) {
	for _, seed := range []string{"0", "1500", "-1", "+5", " 5", "1.5", "soon", "", "2147483647", "2147483648", "99999999999999999999", "10,20"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		values := strings.Split(raw, ",") // a comma stands between two values of the trailer
		c := &call{pushback: values}
		got := c.delay()
		if len(values) != 1 {
			if got != -1 {
				t.Fatalf("values %q: delay %v, want -1 (several values)", values, got)
			}
			return
		}
		v := values[0]
		ms, err := strconv.ParseInt(v, 10, 64)
		digits := v != "" && strings.Trim(v, "0123456789") == ""
		switch {
		case digits && err == nil && ms < 1<<31:
			if got != time.Duration(ms)*time.Millisecond {
				t.Fatalf("%q: delay %v, want %dms", v, got, ms)
			}
		case got != -1:
			t.Fatalf("%q: delay %v, want -1 (not a 31-bit count of milliseconds)", v, got)
		}
	})
}

// No trailer, no delay: the policy's backoff alone decides.
func TestNoPushbackIsNoDelay(t *testing.T) {
	if d := (&call{}).delay(); d != 0 {
		t.Fatalf("delay %v without a pushback trailer, want 0", d)
	}
}

// A transparent retry is not a hidden one: grpc-go makes it only for a
// stream the server never processed. The events are those grpc-go's
// stream.go reports for a first attempt refused and its transparent retry.
func TestTransparentRetriesAreNotHiddenRetries(t *testing.T) {
	i := &Interceptor{}
	c := &call{Context: context.Background()}
	i.HandleRPC(c, &stats.Begin{Client: true})
	i.HandleRPC(c, &stats.OutHeader{Client: true})
	i.HandleRPC(c, &stats.Begin{Client: true, IsTransparentRetryAttempt: true})
	if n := c.hiddenRetries(); n != 0 {
		t.Fatalf("hidden retries %d, want 0 after one attempt and a transparent retry", n)
	}
	i.HandleRPC(c, &stats.Begin{Client: true})
	if n := c.hiddenRetries(); n != 1 {
		t.Fatalf("hidden retries %d, want 1 after a second non-transparent attempt", n)
	}
}

// grpc-go's status for a stream the server did not process proves
// non-dispatch only as grpc-go made it: whole, after one attempt whose last
// stream got neither headers nor trailers. The same words in the server's
// own status, in another code, after a hidden retry or after the server's
// headers prove nothing.
func TestOnlyGrpcGosOwnUnprocessedStatusIsProof(t *testing.T) {
	refused := status.Error(grpccodes.Unavailable, refusedStreamMessage)
	begin, transparent := &stats.Begin{Client: true}, &stats.Begin{Client: true, IsTransparentRetryAttempt: true}
	out, header, trailer := &stats.OutHeader{Client: true}, &stats.InHeader{Client: true}, &stats.InTrailer{Client: true}
	// What grpc-go reports around the io.EOF of a transparent retry the
	// server refused before its request was written (stream.go's
	// replayBufferLocked): the first attempt sent its request and ended
	// refused; the retry queued its headers, sent no payload, and ended
	// with no error.
	payload, endRefused := &stats.OutPayload{Client: true}, &stats.End{Client: true, Error: refused}
	endDrained := &stats.End{Client: true, Error: status.Error(grpccodes.Unavailable, drainingMessage)}
	endOther, end := &stats.End{Client: true, Error: errors.New("EOF")}, &stats.End{Client: true}
	for _, tc := range []struct {
		name   string
		events []stats.RPCStats
		err    error
		want   bool
	}{
		{"refused", []stats.RPCStats{begin, out}, refused, true},
		{"refused, then its transparent retry refused", []stats.RPCStats{begin, out, transparent, out}, refused, true},
		{"draining", []stats.RPCStats{begin, out}, status.Error(grpccodes.Unavailable, drainingMessage), true},
		{"another code", []stats.RPCStats{begin, out}, status.Error(grpccodes.Internal, refusedStreamMessage), false},
		{"more words", []stats.RPCStats{begin, out}, status.Error(grpccodes.Unavailable, drainingMessage+": EOF"), false},
		{"the server's headers", []stats.RPCStats{begin, out, header}, refused, false},
		{"the server's trailers", []stats.RPCStats{begin, out, trailer}, refused, false},
		{"after a hidden retry", []stats.RPCStats{begin, out, begin, out}, refused, false},
		{"not a status", []stats.RPCStats{begin, out}, errors.New(refusedStreamMessage), false},
		{"io.EOF: a refused stream's retry sent no request", []stats.RPCStats{begin, out, payload, endRefused, transparent, out, end}, io.EOF, true},
		{"io.EOF: a drained stream's retry sent no request", []stats.RPCStats{begin, out, payload, endDrained, transparent, out, end}, io.EOF, true},
		{"io.EOF: the retry sent its request", []stats.RPCStats{begin, out, payload, endRefused, transparent, out, payload, end}, io.EOF, false},
		{"io.EOF: the first ended otherwise", []stats.RPCStats{begin, out, payload, endOther, transparent, out, end}, io.EOF, false},
		{"io.EOF: a first attempt", []stats.RPCStats{begin, out, end}, io.EOF, false},
		{"io.EOF: the retry had the server's headers", []stats.RPCStats{begin, out, payload, endRefused, transparent, out, header, end}, io.EOF, false},
		{"another error: the retry sent no request", []stats.RPCStats{begin, out, payload, endRefused, transparent, out, end}, io.ErrUnexpectedEOF, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &call{Context: context.Background(), watched: true}
			for _, s := range tc.events {
				(&Interceptor{}).HandleRPC(c, s)
			}
			if got := c.unprocessed(tc.err); got != tc.want {
				t.Fatalf("unprocessed = %t, want %t", got, tc.want)
			}
			if c.mayHaveApplied(tc.err) == tc.want {
				t.Fatalf("mayHaveApplied = %t, want %t", !tc.want, !tc.want)
			}
		})
	}
}
