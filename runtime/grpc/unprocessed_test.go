package retrygrpc_test

import (
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	"github.com/retryguard/retryguard/contract/codes"
	"github.com/retryguard/retryguard/contract/limits"
	"github.com/retryguard/retryguard/runtime/retry"
)

// refusing is a raw HTTP/2 server on loopback that processes no stream: it
// answers the client preface and the SETTINGS, then meets every stream's
// HEADERS with refuse. It counts the streams it received.
func refusing(t *testing.T, refuse func(fr *http2.Framer, stream uint32) error) (addr string, streams *atomic.Int32) {
	t.Helper()
	return refusingTold(t, refuse, nil)
}

// refusingTold is refusing that also says, on handled, when the client has
// read each refusal: it follows each with a PING, whose ACK the client's
// transport writes only after it has handled every frame before it (its
// reader handles frames in order), or the client closes the connection.
func refusingTold(t *testing.T, refuse func(fr *http2.Framer, stream uint32) error, handled chan<- struct{}) (addr string, streams *atomic.Int32) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	streams = new(atomic.Int32)
	var conns sync.WaitGroup
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			conns.Go(func() { serveRefusing(conn, refuse, streams, handled) })
		}
	}()
	t.Cleanup(func() {
		_ = lis.Close()
		<-accepted
		conns.Wait() // each ends when the client's channel, closed first, closes its connection
	})
	return lis.Addr().String(), streams
}

func serveRefusing(conn net.Conn, refuse func(*http2.Framer, uint32) error, streams *atomic.Int32, handled chan<- struct{}) {
	defer conn.Close()
	pending := 0 // refusals whose PING has no ACK yet
	defer func() {
		for ; pending > 0; pending-- {
			handled <- struct{}{} // a connection the client closed was read to its end
		}
	}()
	if _, err := io.ReadFull(conn, make([]byte, len(http2.ClientPreface))); err != nil {
		return
	}
	fr := http2.NewFramer(conn, conn)
	if fr.WriteSettings() != nil {
		return
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				err = fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			switch {
			case !f.IsAck():
				err = fr.WritePing(true, f.Data)
			case pending > 0:
				pending--
				handled <- struct{}{}
			}
		case *http2.HeadersFrame:
			streams.Add(1)
			err = refuse(fr, f.StreamID)
			if err == nil && handled != nil {
				pending++
				err = fr.WritePing(false, [8]byte{})
			}
		}
		if err != nil {
			return
		}
	}
}

// A stream the server refused unprocessed was not dispatched (RFC 9113
// §8.7, §6.8; issue 28, item 1): RST_STREAM(REFUSED_STREAM), and a GOAWAY
// whose last stream ID is below the stream's. Under a policy without a key,
// where anything that may have been applied ends UNKNOWN_OUTCOME after one
// attempt, each is a ConnectionRefused that sent nothing: the policy's three
// attempts, each of them a stream and grpc-go's transparent retry of it, and
// TERMINAL_EXHAUSTED, with grpc-go's UNAVAILABLE.
func TestAStreamTheServerRefusedIsNotDispatched(t *testing.T) {
	for name, refuse := range refusals {
		t.Run(name, func(t *testing.T) {
			addr, streams := refusing(t, refuse)
			ic, _, _, _, dead := observed(grpcPolicy(keyless))
			refusedEveryTime(t, check(dial(t, addr, ic.DialOptions()...)), streams, dead)
		})
	}
}

// refusals are the two ways a server refuses a stream unprocessed.
var refusals = map[string]func(*http2.Framer, uint32) error{
	"REFUSED_STREAM": func(fr *http2.Framer, stream uint32) error {
		return fr.WriteRSTStream(stream, http2.ErrCodeRefusedStream)
	},
	"GOAWAY below the stream": func(fr *http2.Framer, stream uint32) error {
		return fr.WriteGoAway(stream-1, http2.ErrCodeNo, nil) // stream IDs are odd: stream-1 was never opened
	},
}

// refusedEveryTime holds a keyless call to a server that refused every
// stream to what that is: the policy's three attempts, each a stream and
// grpc-go's transparent retry of it, each a transient ConnectionRefused
// that sent nothing, TERMINAL_EXHAUSTED with grpc-go's UNAVAILABLE, and no
// dead letter saying anything may have been applied.
func refusedEveryTime(t *testing.T, err error, streams *atomic.Int32, dead *letters) *retry.Error {
	t.Helper()
	re := retryError(t, err)
	if re.State != retry.TerminalExhausted || re.Code != codes.RetryLimitExceeded || re.Attempts != 3 {
		t.Errorf("%s %s after %d attempts, want TERMINAL_EXHAUSTED ERR_RETRY_LIMIT_EXCEEDED after 3: %v", re.State, re.Code, re.Attempts, err)
	}
	if re.Last.Dispatched || re.Last.Transport != limits.ConnectionRefused || re.Last.Class != retry.Transient {
		t.Errorf("last evidence %+v, want a transient ConnectionRefused, not dispatched", re.Last)
	}
	if n := streams.Load(); n != 6 {
		t.Errorf("the server received %d streams, want 6: three attempts and grpc-go's transparent retry of each", n)
	}
	if status.Code(err) != grpccodes.Unavailable {
		t.Errorf("status.Code(err) = %s, want grpc-go's Unavailable for the refusal: %v", status.Code(err), err)
	}
	for _, l := range dead.written() {
		for _, a := range l.Attempts {
			if l.State == retry.UnknownOutcome || a.Evidence.Dispatched {
				t.Errorf("dead letter %s says attempt %d may have been applied: %+v", l.State, a.Attempt, a.Evidence)
			}
		}
	}
	return re
}

// grpc-go's transparent retry of a refused stream may itself be refused
// before its request is written: the stream is closed when the caller
// comes to send the message, and grpc-go returns a bare io.EOF, not a
// status (stream.go, replayBufferLocked). Neither stream was processed, so
// the attempt is a ConnectionRefused that sent nothing, as when the retry's
// refusal comes later, and the caller hears grpc-go's UNAVAILABLE for the
// refusal, not an UNKNOWN "EOF" that may have been applied. The race is
// forced: a second stats handler holds each transparent retry after its
// headers are queued until the client has read the server's refusal of it.
func TestATransparentRetryRefusedBeforeItsRequestSentNothing(t *testing.T) {
	for name, refuse := range refusals {
		t.Run(name, func(t *testing.T) {
			handled := make(chan struct{}, 16)
			addr, streams := refusingTold(t, refuse, handled)
			hold := &holdRetries{handled: handled}
			ic, _, _, _, dead := observed(grpcPolicy(keyless))
			re := refusedEveryTime(t, check(dial(t, addr, append(ic.DialOptions(), grpc.WithStatsHandler(hold))...)), streams, dead)
			if hold.held != re.Attempts || hold.late {
				t.Errorf("held %d transparent retries until their refusal was read (late: %v), want one an attempt", hold.held, hold.late)
			}
		})
	}
}

// holdRetries is a stats.Handler that holds the caller of each transparent
// retry, once its headers are queued (stats.OutHeader), until the server's
// refusal of that stream has been read: the second refusal of each of the
// executor's attempts. Its calls come one at a time.
type holdRetries struct {
	handled     <-chan struct{}
	transparent bool
	read, held  int
	late        bool // a refusal was not read within the wait
}

func (h *holdRetries) HandleRPC(_ context.Context, s stats.RPCStats) {
	switch s := s.(type) {
	case *stats.Begin:
		h.transparent = s.IsTransparentRetryAttempt
	case *stats.OutHeader:
		if !h.transparent {
			return
		}
		for h.read < 2*(h.held+1) {
			select {
			case <-h.handled:
				h.read++
			case <-time.After(10 * time.Second):
				h.late = true
				return
			}
		}
		h.held++
	}
}

func (*holdRetries) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context   { return ctx }
func (*holdRetries) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (*holdRetries) HandleConn(context.Context, stats.ConnStats)                       {}

// A stream reset with any other code may have been processed: still
// dispatched, so without a key it ends UNKNOWN_OUTCOME after one attempt.
func TestAStreamResetOtherwiseIsDispatched(t *testing.T) {
	addr, streams := refusing(t, func(fr *http2.Framer, stream uint32) error { return fr.WriteRSTStream(stream, http2.ErrCodeInternal) })
	ic, _, _, _, _ := observed(grpcPolicy(keyless))
	re := retryError(t, check(dial(t, addr, ic.DialOptions()...)))
	if re.State != retry.UnknownOutcome || re.Attempts != 1 || !re.Last.Dispatched || streams.Load() != 1 {
		t.Errorf("%s after %d attempts (%d streams), last %+v; want UNKNOWN_OUTCOME after 1, dispatched", re.State, re.Attempts, streams.Load(), re.Last)
	}
}

// A real grpc-go server's GracefulStop sends GOAWAY: the call in flight is
// finished, and a call made once the channel has seen the GOAWAY is sent to
// no server (its listener is closed): not dispatched, never UNKNOWN_OUTCOME,
// and the server's handler ran only for the call in flight.
func TestACallAfterAGracefulStopIsNotDispatched(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	h := &health{answer: func(_ context.Context, n int) error {
		if n == 1 {
			close(entered)
			<-release
		}
		return nil
	}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	healthpb.RegisterHealthServer(s, h)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)

	ic, _, _, _, dead := observed(grpcPolicy(keyless))
	conn, err := grpc.NewClient("passthrough:///"+lis.Addr().String(), append(ic.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	client := healthpb.NewHealthClient(conn)
	inFlight := make(chan error, 1)
	go func() { inFlight <- check(client) }()
	<-entered
	stopped := make(chan struct{})
	go func() { s.GracefulStop(); close(stopped) }()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for state := conn.GetState(); state == connectivity.Ready; state = conn.GetState() {
		if !conn.WaitForStateChange(ctx, state) {
			t.Fatal("the channel never saw the GOAWAY")
		}
	}

	err = check(client)
	re := retryError(t, err)
	if re.State == retry.UnknownOutcome || re.Last.Dispatched || h.calls() != 1 {
		t.Errorf("%s, last evidence %+v, %d calls at the server; want no UNKNOWN_OUTCOME, nothing dispatched, only the call in flight: %v",
			re.State, re.Last, h.calls(), err)
	}
	close(release)
	if err := <-inFlight; err != nil {
		t.Errorf("the call in flight: %v, want it finished", err)
	}
	<-stopped
	for _, l := range dead.written() {
		if l.State == retry.UnknownOutcome {
			t.Errorf("dead letter %s: %+v", l.State, l.Attempts)
		}
	}
}
