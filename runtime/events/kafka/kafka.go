// Package kafka publishes Retryguard's lifecycle events and dead letters to
// Kafka with franz-go. Events go to each policy's events.topic as JSON,
// keyed by operation, so one operation's transitions land on one partition
// in order.
package kafka

import (
	"context"
	"encoding/json"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryguard/retryguard/runtime/retry"
)

// DefaultBuffer is the events EventSink buffers before it drops.
const DefaultBuffer = 4096

// EventSink is a non-blocking retry.EventSink: Emit enqueues into a bounded
// buffer (dropping and counting when full) and Run produces from it. It is
// safe for concurrent use.
type EventSink struct {
	*retry.ChannelSink
	client *kgo.Client
	done   chan struct{}
}

// NewEventSink buffers up to buffer events for client.
func NewEventSink(client *kgo.Client, buffer int) *EventSink {
	if buffer <= 0 {
		buffer = DefaultBuffer
	}
	return &EventSink{ChannelSink: retry.NewChannelSink(buffer), client: client, done: make(chan struct{})}
}

// Run produces buffered events until Close, then flushes. Events of a
// policy without an events topic are dropped here, never produced.
func (s *EventSink) Run(ctx context.Context) {
	defer close(s.done)
	for ev := range s.C {
		if ev.Topic == "" {
			continue
		}
		value, err := json.Marshal(ev)
		if err != nil {
			continue
		}
		s.client.Produce(ctx, &kgo.Record{Topic: ev.Topic, Key: []byte(strconv.FormatUint(ev.Operation, 10)), Value: value}, nil)
	}
	flushCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = s.client.Flush(flushCtx)
}

// Close stops accepting events, and returns once Run has flushed the rest.
// No Emit may follow Close.
func (s *EventSink) Close() {
	close(s.C)
	<-s.done
}

// DeadLetters is a retry.DeadLetterSink on a Kafka topic: Write returns once
// the letter is acknowledged by all in-sync replicas (the client's default).
type DeadLetters struct {
	Client  *kgo.Client
	Topic   string
	Timeout time.Duration
}

// Write produces one dead letter synchronously.
func (d *DeadLetters) Write(_ context.Context, l retry.DeadLetter) error {
	value, err := json.Marshal(l)
	if err != nil {
		return err
	}
	timeout := d.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return d.Client.ProduceSync(ctx, &kgo.Record{Topic: d.Topic, Key: []byte(l.Key), Value: value}).FirstErr()
}
