package kafka

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/retryguard/retryguard/runtime/retry"
)

// watchdog bounds how long a test waits for a call that must not block; it
// is far above every timeout the tests configure.
const watchdog = 10 * time.Second

func cluster(t *testing.T, opts ...kgo.Opt) (*kfake.Cluster, *kgo.Client) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic, dlq))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	client, err := kgo.NewClient(append(opts, kgo.SeedBrokers(c.ListenAddrs()...))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	return c, client
}

// downCluster is a client whose only broker has gone away.
func downCluster(t *testing.T) *kgo.Client {
	c, client := cluster(t)
	c.Close()
	return client
}

// within runs f and fails the test if it has not returned within watchdog.
func within(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(watchdog):
		t.Fatalf("%s still blocked after %s", what, watchdog)
	}
}

// Events the Kafka client could not deliver are counted as dropped, and
// Close is bounded: after it, emitted = delivered + dropped.
func TestEventsLostInTheClientAreDropped(t *testing.T) {
	sink := NewEventSink(downCluster(t), 64)
	sink.FlushTimeout = 300 * time.Millisecond
	go sink.Run(context.Background())
	for i := range 10 {
		sink.Emit(retry.Event{OperationID: uint64(i), Topic: topic, To: retry.Attempting})
	}
	sink.Emit(retry.Event{OperationID: 99, To: retry.Attempting}) // no events topic: not emitted at all
	within(t, "Close", sink.Close)
	if sink.Emitted() != 10 || sink.Delivered() != 0 || sink.Dropped() != 10 {
		t.Fatalf("emitted %d, delivered %d, dropped %d", sink.Emitted(), sink.Delivered(), sink.Dropped())
	}
}

// A full buffer drops too, and the sum still holds.
func TestEventCountersAddUpWhenTheBufferOverflows(t *testing.T) {
	_, client := cluster(t)
	sink := NewEventSink(client, 4)
	for i := range 10 { // before Run: only 4 fit
		sink.Emit(retry.Event{OperationID: uint64(i), Topic: topic, To: retry.Attempting})
	}
	go sink.Run(context.Background())
	within(t, "Close", sink.Close)
	if sink.Emitted() != 10 || sink.Delivered() != 4 || sink.Dropped() != 6 {
		t.Fatalf("emitted %d, delivered %d, dropped %d", sink.Emitted(), sink.Delivered(), sink.Dropped())
	}
}

// The broker is killed mid-run with events in flight (their produce request
// sent and never answered). Close still returns within its FlushTimeout,
// counting what it gave up on as dropped, so that emitted = delivered +
// dropped once it has returned; a callback that comes later changes
// nothing. On the old sink, Close waited for every callback, and a request
// sent to a broker that went away never gets one: it was still blocked 40 s
// later.
func TestCloseIsBoundedWhenTheBrokerDiesMidRun(t *testing.T) {
	c, client := cluster(t)
	sink := NewEventSink(client, 1024)
	sink.FlushTimeout = 500 * time.Millisecond
	go sink.Run(context.Background())
	for i := range 20 {
		sink.Emit(retry.Event{OperationID: uint64(i), Topic: topic, To: retry.Attempting})
	}
	waitFor(t, "the first events delivered", func() bool { return sink.Delivered() == 20 })
	held := make(chan struct{})
	var once sync.Once
	c.ControlKey(kmsg.Produce.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		once.Do(func() { close(held) })
		c.SleepControl(func() { select {} }) // the broker never answers
		return nil, nil, false
	})
	for i := range 20 {
		sink.Emit(retry.Event{OperationID: uint64(100 + i), Topic: topic, To: retry.Attempting})
	}
	<-held
	go c.Close() // the broker goes away with the request in flight
	start := time.Now()
	within(t, "Close", sink.Close)
	if took := time.Since(start); took > sink.FlushTimeout+2*time.Second {
		t.Fatalf("Close took %v, over its %v FlushTimeout", took, sink.FlushTimeout)
	}
	e, d, x := sink.Emitted(), sink.Delivered(), sink.Dropped()
	if e != 40 || d+x != e || d < 20 {
		t.Fatalf("after Close: emitted %d, delivered %d, dropped %d", e, d, x)
	}
}

// Cancelling Run's context ends the wait too: Close returns without waiting
// out its FlushTimeout, and the sum holds.
func TestCloseAfterRunsContextEndsDoesNotWait(t *testing.T) {
	c, client := cluster(t)
	c.ControlKey(kmsg.Produce.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		c.SleepControl(func() { select {} })
		return nil, nil, false
	})
	sink := NewEventSink(client, 64)
	sink.FlushTimeout = time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	go sink.Run(ctx)
	for i := range 10 {
		sink.Emit(retry.Event{OperationID: uint64(i), Topic: topic, To: retry.Attempting})
	}
	time.Sleep(100 * time.Millisecond) // let the request go out
	cancel()
	within(t, "Close after Run's context ended", sink.Close)
	if sink.Emitted() != 10 || sink.Delivered()+sink.Dropped() != 10 {
		t.Fatalf("emitted %d, delivered %d, dropped %d", sink.Emitted(), sink.Delivered(), sink.Dropped())
	}
}

// waitFor polls cond until it holds, or fails the test after watchdog.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(watchdog)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, watchdog)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
