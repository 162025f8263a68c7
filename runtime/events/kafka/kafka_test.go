package kafka

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/contract/policyconfig/fixtures"
	"github.com/retryguard/retryguard/runtime/retry"
	"github.com/retryguard/retryguard/runtime/watch"
)

const topic, dlq = "auth.sms.lifecycle.v1", "retryguard.deadletters"

// The sink delivers every transition of every operation, in order, to the
// policy's topic on an in-process Kafka (kfake); dead letters go to theirs.
// policy is the sample with fast backoffs and a generous budget, so that
// operations retry as scripted.
func policy() *policyconfig.Payload {
	p := fixtures.SMS()
	p.Policy.Backoff.Base, p.Policy.Backoff.Cap = fixtures.D("1ms"), fixtures.D("5ms")
	p.Policy.MinRemaining, p.Policy.RetryOnStatus, p.Policy.KeyTemplate = fixtures.D("10ms"), []int32{503}, "SMS-{user_id}"
	p.Policy.EventsTopic = topic
	p.Budget.RetryPercent, p.Budget.MaxTokens = 100, 100
	return p
}

func TestEventsArriveInOrder(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, topic, dlq))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	producer, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()

	sink := NewEventSink(producer, 1024)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go sink.Run(ctx)
	journal := openJournal(t)
	forwarder := &Forwarder{Journal: journal, Client: producer, Topic: dlq}
	go forwarder.Run(ctx)
	emitted := &tee{next: sink, byOp: map[uint64][]retry.State{}}
	ex := retry.New(watch.NewStatic(policy()), retry.WithEventSink(emitted), retry.WithDeadLetters(journal))
	const ops = 40
	for i := range ops {
		calls := 0
		_ = ex.Do(ctx, "sms-2fa-dispatch", retry.Vars{"user_id": fmt.Sprint(i)}, func(context.Context, retry.Attempt) error {
			calls++
			if i%4 == 0 || calls < 2 { // every 4th operation exhausts; the rest succeed on the 2nd attempt
				return retry.Status(503, "")
			}
			return nil
		})
	}
	sink.Close()
	if err := forwarder.Close(); err != nil {
		t.Fatal(err)
	}
	if sink.Dropped() != 0 || sink.Emitted() == 0 || sink.Delivered() != sink.Emitted() {
		t.Fatalf("emitted %d, delivered %d, dropped %d", sink.Emitted(), sink.Delivered(), sink.Dropped())
	}

	consumer, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.ConsumeTopics(topic, dlq),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	byOp := map[uint64][]retry.State{}
	letters := 0
	pollCtx, stop := context.WithTimeout(ctx, 20*time.Second)
	defer stop()
	total := 0
	for _, states := range emitted.byOp {
		total += len(states)
	}
	for events := 0; events < total || letters < emitted.letters; {
		fetches := consumer.PollFetches(pollCtx)
		if pollCtx.Err() != nil {
			t.Fatalf("timed out with %d events and %d dead letters", events, letters)
		}
		fetches.EachRecord(func(r *kgo.Record) {
			if r.Topic == dlq {
				letters++
				return
			}
			var ev retry.Event
			if err := json.Unmarshal(r.Value, &ev); err != nil {
				t.Fatal(err)
			}
			byOp[ev.OperationID] = append(byOp[ev.OperationID], ev.To)
			events++
		})
	}
	for op, want := range emitted.byOp {
		if fmt.Sprint(byOp[op]) != fmt.Sprint(want) {
			t.Fatalf("operation %d arrived as %v, emitted as %v", op, byOp[op], want)
		}
	}
	if len(byOp) != ops || letters != emitted.letters {
		t.Fatalf("%d operations, %d dead letters of %d", len(byOp), letters, emitted.letters)
	}
}

// tee records what the executor emitted, in order, and passes it on.
type tee struct {
	next    retry.EventSink
	mu      sync.Mutex
	byOp    map[uint64][]retry.State
	letters int
}

func (t *tee) Emit(ev retry.Event) {
	t.mu.Lock()
	t.byOp[ev.OperationID] = append(t.byOp[ev.OperationID], ev.To)
	if ev.To.DeadLettered() {
		t.letters++
	}
	t.mu.Unlock()
	t.next.Emit(ev)
}
