package kafka

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryguard/retryguard/runtime/deadletter"
	"github.com/retryguard/retryguard/runtime/retry"
)

// Forwarder ships the dead letters of a journal, the outbox, to a Kafka
// topic (docs/deadletter-journal.md). Each record's value is the letter as
// JSON and its key is deadletter.Identity, the letter's operation identity:
// delivery is at least once, so consumers deduplicate on the key with the
// letter's operation and time (one operation can end in two letters), and
// the topic must not be compacted (docs/deadletter-journal.md).
//
// A batch is marked forwarded in the journal only once Kafka acknowledged
// every record of it; a batch Kafka failed is shipped again after a
// backoff (at most MaxForwardBackoff), and while the broker is away the
// letters wait in the journal, which Write goes on filling: the operation
// that ended never waits for Kafka.
//
// Its zero value with Journal, Client and Topic set is ready; set the other
// fields before Run. Run and Close are called once each; the counters are
// safe for concurrent use.
type Forwarder struct {
	Journal *deadletter.Journal
	Client  *kgo.Client
	Topic   string
	// Batch is the most letters shipped at once (DefaultForwardBatch).
	Batch int
	// Interval is how often the journal is read when it had nothing new
	// (DefaultForwardInterval).
	Interval time.Duration
	// CloseTimeout bounds Close (DefaultCloseTimeout).
	CloseTimeout time.Duration

	forwarded, failures atomic.Uint64
	init                sync.Once
	started             atomic.Bool
	drain, halt, done   chan struct{}

	compactionFailures atomic.Uint64
}

func (f *Forwarder) channels() {
	f.init.Do(func() {
		f.drain, f.halt, f.done = make(chan struct{}), make(chan struct{}), make(chan struct{})
	})
}

// Forwarded counts the letters Kafka acknowledged and the journal marked.
func (f *Forwarder) Forwarded() uint64 { return f.forwarded.Load() }

// Failures counts the batches Kafka failed (or the journal could not
// mark), each shipped again later.
func (f *Forwarder) Failures() uint64 { return f.failures.Load() }

// CompactionFailures counts the batches sent and marked after which the
// journal could not be compacted (deadletter.ErrCompaction). They are not
// failures: forwarding goes on at once, and the next batch compacts again.
func (f *Forwarder) CompactionFailures() uint64 { return f.compactionFailures.Load() }

// Run ships letters until ctx ends or Close has drained the journal. A Run
// after Close returns at once.
func (f *Forwarder) Run(ctx context.Context) {
	f.channels()
	if !f.started.CompareAndSwap(false, true) {
		return
	}
	f.run(ctx)
}

func (f *Forwarder) run(ctx context.Context) {
	defer close(f.done)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-f.halt:
			cancel()
		case <-ctx.Done():
		}
	}()
	batch := f.Batch
	if batch <= 0 {
		batch = DefaultForwardBatch
	}
	interval := f.Interval
	if interval <= 0 {
		interval = DefaultForwardInterval
	}
	send := func(letters []retry.DeadLetter) error { return f.send(ctx, letters) }
	var backoff time.Duration
	for {
		n, err := f.Journal.Forward(batch, send)
		wait := time.Duration(0)
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, deadletter.ErrCompaction):
			// Sent and marked: only the compaction failed.
			f.compactionFailures.Add(1)
			f.forwarded.Add(uint64(n))
			backoff = 0
			continue
		case err != nil:
			f.failures.Add(1)
			backoff = min(max(2*backoff, 50*time.Millisecond), MaxForwardBackoff)
			wait = backoff
		case n > 0:
			f.forwarded.Add(uint64(n))
			backoff = 0
			continue
		default:
			select {
			case <-f.drain:
				return // Close asked, and nothing is left
			default:
			}
			wait = interval
		}
		timer := time.NewTimer(wait)
		select {
		case <-timer.C:
		case <-f.drain: // go on at once: Close is waiting
		case <-ctx.Done():
		}
		timer.Stop()
	}
}

// send produces one record per letter and returns once Kafka acknowledged
// them all, or with the first failure, or when ctx ends.
func (f *Forwarder) send(ctx context.Context, letters []retry.DeadLetter) error {
	results := make(chan error, len(letters))
	for _, l := range letters {
		value, err := json.Marshal(l)
		if err != nil {
			return err
		}
		r := &kgo.Record{Topic: f.Topic, Key: []byte(deadletter.Identity(l)), Value: value}
		f.Client.Produce(ctx, r, func(_ *kgo.Record, err error) { results <- err })
	}
	var first error
	for range letters {
		select {
		case err := <-results:
			if first == nil {
				first = err
			}
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	return first
}

// Close ships the letters left in the journal for at most CloseTimeout
// (itself, if Run has not started), then stops Run, and returns once it
// has. Nothing is dropped: a letter not shipped by then stays in the
// journal for the next forwarder, and Close returns an error that counts
// them. It neither closes the client nor the journal.
func (f *Forwarder) Close() error {
	f.channels()
	close(f.drain)
	timeout := f.CloseTimeout
	if timeout <= 0 {
		timeout = DefaultCloseTimeout
	}
	if f.started.CompareAndSwap(false, true) {
		go f.run(context.Background())
	}
	timer := time.NewTimer(timeout)
	select {
	case <-f.done:
	case <-timer.C:
		close(f.halt)
		<-f.done
	}
	timer.Stop()
	left, err := f.Journal.Unforwarded()
	if err != nil {
		return err
	}
	if left > 0 {
		return fmt.Errorf("kafka: %d dead letters were not forwarded to %s within %v; they stay in the journal for the next forwarder", left, f.Topic, timeout)
	}
	return nil
}
