package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryguard/retryguard/runtime/deadletter"
	"github.com/retryguard/retryguard/runtime/events/kafka"
	"github.com/retryguard/retryguard/runtime/retry"
)

// The fallback queue (MC-RT-01: "100% of exhausted dispatches cleanly
// arrive in fallback queue without lost records"): Option C's dead letters
// go to the dead-letter journal on disk, the outbox, and a forwarder ships
// them to a Kafka topic. The broker is kfake, in process, its log on disk
// so that it can be killed mid-fault and started again on the same
// address; the drill then reads the topic back. docs/drill.md.

// queueTopic is the drill's dead-letter topic.
const queueTopic = "retryguard.deadletters"

// drainTimeout bounds how long the forwarder goes on shipping after the
// load, and how long the topic is read back.
const drainTimeout = 60 * time.Second

// queue is the broker, the forwarder and the outage the drill puts them
// through.
type queue struct {
	dir, addr string
	port      int
	journal   *deadletter.Journal
	client    *kgo.Client
	fwd       *kafka.Forwarder

	mu      sync.Mutex
	broker  *kfake.Cluster
	outage  [2]time.Duration // when the broker was killed and when it was back, since the start
	stopped chan struct{}
}

// queueReport is report.json's account of the fallback queue.
type queueReport struct {
	Topic  string `json:"topic"`
	Broker string `json:"broker"`
	// Journal's file system, by its statfs type: the letters' first stop.
	JournalFS string `json:"journalFilesystem"`
	// BrokerKilledAt and BrokerBackAt are seconds since the load began.
	BrokerKilledAt float64 `json:"brokerKilledAtSeconds"`
	BrokerBackAt   float64 `json:"brokerBackAtSeconds"`
	// Forwarded counts the letters the forwarder shipped and the journal
	// marked; Records the records read back from the topic, duplicates
	// included; Delivered Option C's dead letters among them.
	Forwarded uint64 `json:"forwarded"`
	Records   int    `json:"records"`
	Delivered int    `json:"delivered"`
	// LeftInJournal counts letters still unforwarded after the drain;
	// JournalBytes is the journal's size then (compaction keeps it small).
	LeftInJournal int    `json:"leftInJournal"`
	JournalBytes  int64  `json:"journalBytes"`
	Failures      uint64 `json:"forwarderFailures"`
}

// startQueue starts the broker with its log in dir and a forwarder from
// journal to it.
func startQueue(dir string, journal *deadletter.Journal) (*queue, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	q := &queue{dir: dir, port: port, addr: fmt.Sprintf("127.0.0.1:%d", port), journal: journal, stopped: make(chan struct{})}
	if err := q.start(); err != nil {
		return nil, err
	}
	if q.client, err = kgo.NewClient(kgo.SeedBrokers(q.addr), kgo.RetryBackoffFn(func(int) time.Duration { return 100 * time.Millisecond })); err != nil {
		q.kill()
		return nil, err
	}
	q.fwd = &kafka.Forwarder{Journal: journal, Client: q.client, Topic: queueTopic, CloseTimeout: drainTimeout}
	go q.fwd.Run(context.Background())
	return q, nil
}

func (q *queue) start() error {
	b, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(q.port), kfake.DataDir(q.dir), kfake.SeedTopics(3, queueTopic))
	if err != nil {
		return err
	}
	q.mu.Lock()
	q.broker = b
	q.mu.Unlock()
	return nil
}

func (q *queue) kill() {
	q.mu.Lock()
	b := q.broker
	q.broker = nil
	q.mu.Unlock()
	if b != nil {
		b.Close()
	}
}

// breakAt kills the broker at start+at and starts it again down later,
// unless stop comes first.
func (q *queue) breakAt(start time.Time, at, down time.Duration) {
	if down <= 0 {
		return
	}
	go func() {
		select {
		case <-time.After(time.Until(start.Add(at))):
		case <-q.stopped:
			return
		}
		q.mu.Lock()
		q.outage[0] = time.Since(start)
		q.mu.Unlock()
		q.kill()
		select {
		case <-time.After(down):
		case <-q.stopped:
		}
		if err := q.start(); err == nil {
			q.mu.Lock()
			q.outage[1] = time.Since(start)
			q.mu.Unlock()
		}
	}()
}

// drain ships what is left, reads the topic back until every key in want
// is there (or drainTimeout passes), and reports; delivered holds the keys
// of want that the topic holds.
func (q *queue) drain(want map[string]bool, journalPath string) (queueReport, map[string]bool, error) {
	close(q.stopped)
	q.mu.Lock()
	down := q.broker == nil
	q.mu.Unlock()
	if down { // the outage outlasted the load
		if err := q.start(); err != nil {
			return queueReport{}, nil, err
		}
	}
	rep := queueReport{Topic: queueTopic, Broker: "kfake, in process, log on disk", JournalFS: filesystem(journalPath)}
	q.mu.Lock()
	rep.BrokerKilledAt, rep.BrokerBackAt = q.outage[0].Seconds(), q.outage[1].Seconds()
	q.mu.Unlock()
	closeErr := q.fwd.Close()
	rep.Forwarded, rep.Failures = q.fwd.Forwarded(), q.fwd.Failures()
	rep.LeftInJournal, _ = q.journal.Unforwarded()
	if fi, err := os.Stat(journalPath); err == nil {
		rep.JournalBytes = fi.Size()
	}
	q.client.Close()
	defer q.kill()
	delivered, records, err := readTopic(q.addr, want)
	rep.Records, rep.Delivered = records, len(delivered)
	if err != nil {
		return rep, delivered, err
	}
	if closeErr != nil {
		return rep, delivered, closeErr
	}
	return rep, delivered, nil
}

// readTopic reads the topic from its start until it has seen every key in
// want, or drainTimeout passes; it returns those of want it saw and how
// many records it read.
func readTopic(addr string, want map[string]bool) (map[string]bool, int, error) {
	consumer, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(queueTopic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return nil, 0, err
	}
	defer consumer.Close()
	ctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	seen, records := map[string]bool{}, 0
	for len(seen) < len(want) && ctx.Err() == nil {
		consumer.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			records++
			var l retry.DeadLetter
			if json.Unmarshal(r.Value, &l) == nil && want[l.Key] && string(r.Key) == deadletter.Identity(l) {
				seen[l.Key] = true
			}
		})
	}
	return seen, records, nil
}

// filesystem names the file system holding path's directory.
func filesystem(path string) string {
	var st syscall.Statfs_t
	if err := syscall.Statfs(filepath.Dir(path), &st); err != nil {
		return "unknown"
	}
	switch uint32(st.Type) {
	case 0x01021994:
		return "tmpfs"
	case 0xEF53:
		return "ext4"
	case 0x58465342:
		return "xfs"
	case 0x9123683E:
		return "btrfs"
	case 0x794C7630:
		return "overlayfs"
	}
	return fmt.Sprintf("0x%x", uint32(st.Type))
}
