// Package kafka publishes Retryguard's lifecycle events and dead letters to
// Kafka with franz-go, never on the caller's path.
//
// Events go to each policy's events.topic as JSON, keyed by operation, so
// one operation's transitions land on one partition in order. EventSink
// counts what it is given (emitted), what Kafka acknowledged (delivered)
// and what was lost on the way (dropped): a full buffer, a record the
// client failed, a record still unacknowledged when Close's FlushTimeout
// ran out. Once Close has returned, emitted = delivered + dropped.
//
// Dead letters are not produced by the operation that ended: it writes
// them to the local journal (runtime/deadletter), its outbox, and a
// Forwarder ships them from there, at least once, keyed by the letter's
// operation identity (docs/deadletter-journal.md).
package kafka

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryguard/retryguard/runtime/retry"
)

// Defaults of the sinks.
const (
	// DefaultBuffer is the events EventSink buffers before it drops.
	DefaultBuffer = 4096
	// DefaultFlushTimeout bounds how long EventSink.Close waits for Kafka to
	// take the buffered events; what is left then is dropped.
	DefaultFlushTimeout = 10 * time.Second
	// DefaultCloseTimeout bounds how long Forwarder.Close goes on shipping
	// the letters left in the journal; the rest stay there.
	DefaultCloseTimeout = 10 * time.Second
	// DefaultForwardBatch is the most letters the forwarder ships at once.
	DefaultForwardBatch = 256
	// DefaultForwardInterval is how often the forwarder looks for new
	// letters when it has found none.
	DefaultForwardInterval = 20 * time.Millisecond
	// MaxForwardBackoff is the longest the forwarder waits before trying
	// again after Kafka failed a batch.
	MaxForwardBackoff = 2 * time.Second
)

// outcomes counts records produced through a client: each is emitted once
// and then settled once, as delivered or dropped, by its produce callback or
// by abandon, whichever comes first. A record that franz-go has sent to a
// broker cannot be failed until the broker answers, and a broker that went
// away never does, so a bounded Close gives up on the records still pending
// and counts them as dropped: "dropped" means "not known to be delivered".
// It is safe for concurrent use.
type outcomes struct {
	emitted, delivered, dropped atomic.Uint64

	mu      sync.Mutex
	pending map[*settlement]struct{}
	idle    chan struct{} // closed when pending becomes empty, if someone waits
}

// settlement is one record's outcome, counted once.
type settlement struct{ done atomic.Bool }

// produce sends r with ctx and counts its outcome; done, if not nil, gets
// the outcome too, unless the record was abandoned first. It blocks only
// while the client's buffer is full.
func (o *outcomes) produce(ctx context.Context, client *kgo.Client, r *kgo.Record, done func(error)) {
	client.Produce(ctx, r, o.promise(done))
}

// promise registers one pending record and returns the callback that
// settles it, then passes its outcome to done.
func (o *outcomes) promise(done func(error)) func(*kgo.Record, error) {
	s := &settlement{}
	o.mu.Lock()
	if o.pending == nil {
		o.pending = map[*settlement]struct{}{}
	}
	o.pending[s] = struct{}{}
	o.mu.Unlock()
	return func(_ *kgo.Record, err error) {
		if !o.settle(s) {
			return // abandoned: already counted as dropped
		}
		if err != nil {
			o.dropped.Add(1)
		} else {
			o.delivered.Add(1)
		}
		if done != nil {
			done(err)
		}
	}
}

// settle removes s from the pending records; it reports false when s was
// settled already.
func (o *outcomes) settle(s *settlement) bool {
	if !s.done.CompareAndSwap(false, true) {
		return false
	}
	o.mu.Lock()
	delete(o.pending, s)
	if len(o.pending) == 0 && o.idle != nil {
		close(o.idle)
		o.idle = nil
	}
	o.mu.Unlock()
	return true
}

// wait returns once no record is pending, or when ctx ends; then it settles
// every record still pending as dropped, and returns how many that was.
func (o *outcomes) wait(ctx context.Context) int {
	o.mu.Lock()
	idle := make(chan struct{})
	if len(o.pending) == 0 {
		close(idle)
	} else {
		o.idle = idle
	}
	o.mu.Unlock()
	select {
	case <-idle:
		return 0
	case <-ctx.Done():
	}
	o.mu.Lock()
	left := make([]*settlement, 0, len(o.pending))
	for s := range o.pending {
		left = append(left, s)
	}
	o.idle = nil
	o.mu.Unlock()
	abandoned := 0
	for _, s := range left {
		if o.settle(s) {
			o.dropped.Add(1)
			abandoned++
		}
	}
	return abandoned
}

// EventSink is a non-blocking retry.EventSink: Emit enqueues into a bounded
// buffer (dropping and counting when full) and Run produces from it. It is
// safe for concurrent use.
type EventSink struct {
	*retry.ChannelSink
	// FlushTimeout bounds Close (DefaultFlushTimeout). Set it before Run.
	FlushTimeout time.Duration

	client *kgo.Client
	done   chan struct{}
	counts outcomes
	onDrop func()

	// mu guards closed and the send into C, so that an Emit after Close
	// is dropped rather than sent on a closed channel.
	mu       sync.RWMutex
	closed   bool
	closing  chan struct{} // closed by Close, once deadline is set
	deadline time.Time     // when Close gives up on what is left
}

// NewEventSink buffers up to buffer events for client.
func NewEventSink(client *kgo.Client, buffer int) *EventSink {
	if buffer <= 0 {
		buffer = DefaultBuffer
	}
	s := &EventSink{ChannelSink: retry.NewChannelSink(buffer), client: client, done: make(chan struct{}), closing: make(chan struct{})}
	s.ChannelSink.OnDrop(s.dropped)
	return s
}

// Emit enqueues ev, or drops it when the buffer is full or the sink is
// closed. Events of a policy without an events topic are not for Kafka:
// they are neither buffered nor counted.
func (s *EventSink) Emit(ev retry.Event) {
	if ev.Topic == "" {
		return
	}
	s.counts.emitted.Add(1)
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		s.dropped()
		return
	}
	s.ChannelSink.Emit(ev)
}

// OnDrop calls f for every dropped event, for example a metric's Inc. Call
// it before the sink is in use.
func (s *EventSink) OnDrop(f func()) { s.onDrop = f }

func (s *EventSink) dropped() {
	s.counts.dropped.Add(1)
	if s.onDrop != nil {
		s.onDrop()
	}
}

// Emitted counts the events given to the sink with an events topic.
func (s *EventSink) Emitted() uint64 { return s.counts.emitted.Load() }

// Delivered counts the events Kafka acknowledged.
func (s *EventSink) Delivered() uint64 { return s.counts.delivered.Load() }

// Dropped counts the events lost: a full buffer, or the Kafka client failed
// them.
func (s *EventSink) Dropped() uint64 { return s.counts.dropped.Load() }

// Run produces buffered events until Close, then flushes until FlushTimeout
// after Close was called. The events still unacknowledged then are given up
// on and counted as dropped (a late acknowledgement changes no count), so
// Close never waits longer than FlushTimeout, even for a broker that went
// away with a request in flight or with the client's buffer full (Produce
// blocked). Cancelling ctx fails the events not yet sent and ends Close's
// wait at once.
func (s *EventSink) Run(ctx context.Context) {
	defer close(s.done)
	produceCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { // Close's deadline also ends a Produce waiting for room in the client's buffer
		select {
		case <-s.closing:
		case <-produceCtx.Done():
			return
		}
		t := time.NewTimer(time.Until(s.deadline))
		defer t.Stop()
		select {
		case <-t.C:
			cancel()
		case <-produceCtx.Done():
		}
	}()
	for ev := range s.C {
		value, err := json.Marshal(ev)
		if err != nil {
			s.dropped()
			continue
		}
		r := &kgo.Record{Topic: ev.Topic, Key: []byte(strconv.FormatUint(ev.OperationID, 10)), Value: value}
		s.counts.produce(produceCtx, s.client, r, func(err error) {
			if err != nil && s.onDrop != nil {
				s.onDrop()
			}
		})
	}
	flushCtx, stop := context.WithDeadline(ctx, s.deadline) // C is closed only once Close set it
	defer stop()
	_ = s.client.Flush(flushCtx)
	// Fail what Kafka has not taken; what it took and has not answered is
	// waited for until the same deadline.
	cancel()
	if n := s.counts.wait(flushCtx); n > 0 && s.onDrop != nil {
		for range n {
			s.onDrop()
		}
	}
}

// Close stops accepting events, and returns once Run has flushed the rest,
// within FlushTimeout (DefaultFlushTimeout); then emitted = delivered +
// dropped. An Emit after Close is dropped and counted. Close waits for
// Run, which must have been started; a second Close only waits.
func (s *EventSink) Close() {
	s.mu.Lock()
	if !s.closed {
		timeout := s.FlushTimeout
		if timeout <= 0 {
			timeout = DefaultFlushTimeout
		}
		s.closed, s.deadline = true, time.Now().Add(timeout)
		close(s.closing)
		close(s.C)
	}
	s.mu.Unlock()
	<-s.done
}
