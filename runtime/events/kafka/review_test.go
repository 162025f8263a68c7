package kafka

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryguard/retryguard/runtime/retry"
)

// Issue 20: "EventSink.Close and the forwarder's Close are bounded by a
// documented timeout". Run produces each event with Run's own context, so
// once the client's buffer is full (MaxBufferedRecords, 10,000 by default:
// a few seconds of the drill's events with the broker gone) Run blocks in
// Produce, Close waits for Run, and FlushTimeout never starts.
func TestReviewEventSinkCloseBoundedWhenClientBufferFull(t *testing.T) {
	c, client := cluster(t, kgo.MaxBufferedRecords(4))
	c.Close() // the broker is gone for the rest of the run
	sink := NewEventSink(client, 64)
	sink.FlushTimeout = 300 * time.Millisecond
	go sink.Run(context.Background())
	for i := range 32 {
		sink.Emit(retry.Event{Operation: uint64(i), Topic: topic, To: retry.Attempting})
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
	if e, d, x := sink.Emitted(), sink.Delivered(), sink.Dropped(); e != d+x {
		t.Fatalf("emitted %d != delivered %d + dropped %d", e, d, x)
	}
}
