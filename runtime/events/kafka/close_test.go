package kafka

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryguard/retryguard/runtime/deadletter"
	"github.com/retryguard/retryguard/runtime/retry"
)

// Issue 20: "EventSink.Close and the forwarder's Close are bounded by a
// documented timeout", and "emitted = delivered + dropped after Close
// returns". Once the client's buffer is full (MaxBufferedRecords, 10,000 by
// default: a few seconds of the drill's events with the broker gone) Run
// waits in Produce: Close's deadline must end that wait too. An Emit after
// Close is dropped and counted, never a send on a closed channel.
func TestEventSinkCloseBoundedWhenClientBufferFull(t *testing.T) {
	c, client := cluster(t, kgo.MaxBufferedRecords(4))
	c.Close() // the broker is gone for the rest of the run
	sink := NewEventSink(client, 64)
	sink.FlushTimeout = 300 * time.Millisecond
	go sink.Run(context.Background())
	for i := range 32 {
		sink.Emit(retry.Event{OperationID: uint64(i), Topic: topic, To: retry.Attempting})
	}
	done := make(chan struct{})
	start := time.Now()
	go func() { defer close(done); sink.Close() }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("EventSink.Close still blocked %v after it was called, with FlushTimeout %v (emitted %d, delivered %d, dropped %d)",
			time.Since(start).Round(time.Millisecond), sink.FlushTimeout, sink.Emitted(), sink.Delivered(), sink.Dropped())
	}
	// The bound itself, with a second of slack for a shared machine (a
	// bound, not a speed).
	if took := time.Since(start); took > sink.FlushTimeout+time.Second {
		t.Fatalf("EventSink.Close took %v with FlushTimeout %v", took, sink.FlushTimeout)
	}
	if e, d, x := sink.Emitted(), sink.Delivered(), sink.Dropped(); e != d+x {
		t.Fatalf("emitted %d != delivered %d + dropped %d", e, d, x)
	}
	before := sink.Dropped()
	sink.Emit(retry.Event{OperationID: 99, Topic: topic, To: retry.Attempting}) // after Close
	sink.Close()                                                                // a second Close only waits
	if e, d, x := sink.Emitted(), sink.Delivered(), sink.Dropped(); e != d+x || x != before+1 {
		t.Fatalf("an Emit after Close: emitted %d, delivered %d, dropped %d (%d before)", e, d, x, before)
	}
}

// Issue 20, item 3: the journal "never grows without bound while Kafka is
// up". When compaction fails (here: its scratch file cannot be created)
// after Kafka took and the journal marked the batch, the batch counts as
// forwarded and the failure as a compaction failure: no backoff, so the
// outbox does not fall to a batch every MaxForwardBackoff.
func TestCompactionErrorDoesNotThrottleForwarding(t *testing.T) {
	_, client := cluster(t)
	path := filepath.Join(t.TempDir(), "dead.journal")
	if err := os.MkdirAll(path+".compacting/keep", 0o700); err != nil { // a scratch path that cannot be a file
		t.Fatal(err)
	}
	j, err := deadletter.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	const n = 8000 // about 2 MiB: past deadletter.CompactBytes
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < n; i += 16 {
				if err := j.Write(context.Background(), letterOf(i)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	fwd := &Forwarder{Journal: j, Client: client, Topic: dlq}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go fwd.Run(ctx)
	// No speed is asserted: a throttled forwarder shows in Failures (each
	// batch failed and backed off), and the wait is only a bound.
	left := n
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline) && (left > 0 || fwd.Forwarded() != n); {
		time.Sleep(50 * time.Millisecond)
		left, _ = j.Unforwarded()
	}
	if left > 0 || fwd.Forwarded() != n {
		t.Fatalf("after 60 s with Kafka up: %d of %d letters still unforwarded, Forwarded() = %d, %d failed batches",
			left, n, fwd.Forwarded(), fwd.Failures())
	}
	if fwd.CompactionFailures() == 0 || fwd.Failures() != 0 {
		t.Fatalf("compaction failures %d, failed batches %d: the failed compaction was not counted apart", fwd.CompactionFailures(), fwd.Failures())
	}
}

// Forwarder.Close with the broker gone: bounded by CloseTimeout, and its
// error counts the letters left in the journal.
func TestForwarderCloseBoundedBrokerGone(t *testing.T) {
	client := downCluster(t)
	j := openJournal(t)
	for i := range 500 {
		if err := j.Write(context.Background(), letterOf(i)); err != nil {
			t.Fatal(err)
		}
	}
	fwd := &Forwarder{Journal: j, Client: client, Topic: dlq, CloseTimeout: 300 * time.Millisecond}
	go fwd.Run(context.Background())
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	err := fwd.Close()
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("Forwarder.Close took %v with CloseTimeout %v", took, fwd.CloseTimeout)
	}
	if err == nil || !strings.Contains(err.Error(), "500 dead letters") {
		t.Fatalf("Close: %v", err)
	}
}
