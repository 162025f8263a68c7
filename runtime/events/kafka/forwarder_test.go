package kafka

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/retryguard/retryguard/contract/policyconfig/fixtures"
	"github.com/retryguard/retryguard/runtime/clock"
	"github.com/retryguard/retryguard/runtime/deadletter"
	"github.com/retryguard/retryguard/runtime/retry"
	"github.com/retryguard/retryguard/runtime/watch"
)

func openJournal(t *testing.T) *deadletter.Journal {
	t.Helper()
	j, err := deadletter.Open(filepath.Join(t.TempDir(), "dead.journal"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = j.Close() })
	return j
}

func letterOf(i int) retry.DeadLetter {
	return retry.DeadLetter{OperationID: uint64(i), Namespace: "auth", Policy: "sms-2fa-dispatch", Key: fmt.Sprintf("SMS-2FA-%d", i),
		State: retry.UnknownOutcome, Code: "ERR_UNKNOWN_OUTCOME", At: time.Unix(1_790_000_000, 0).UTC()}
}

// broker is a kfake broker that keeps its log on disk, so that it can be
// killed and started again on the same address with every record it took.
type broker struct {
	t    *testing.T
	dir  string
	port int
	c    *kfake.Cluster
}

func newBroker(t *testing.T) *broker {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	b := &broker{t: t, dir: t.TempDir(), port: port}
	b.start()
	t.Cleanup(b.kill)
	return b
}

func (b *broker) start() {
	b.t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(b.port), kfake.DataDir(b.dir), kfake.SyncWrites(),
		kfake.SeedTopics(3, dlq))
	if err != nil {
		b.t.Fatal(err)
	}
	b.c = c
}

func (b *broker) kill() {
	if b.c != nil {
		b.c.Close()
		b.c = nil
	}
}

func (b *broker) addr() string { return fmt.Sprintf("127.0.0.1:%d", b.port) }

// consumeKeys reads the dead-letter topic from the start until it holds
// want distinct keys (or the watchdog ends), and returns the keys with how
// often each came.
func consumeKeys(t *testing.T, addr string, want int) map[string]int {
	t.Helper()
	consumer, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(dlq), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*watchdog)
	defer cancel()
	keys := map[string]int{}
	for len(keys) < want && ctx.Err() == nil {
		consumer.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			var l retry.DeadLetter
			if err := json.Unmarshal(r.Value, &l); err != nil || deadletter.Identity(l) != string(r.Key) {
				t.Errorf("record %q: key is not the letter's identity (%v)", r.Key, err)
			}
			keys[string(r.Key)]++
		})
	}
	return keys
}

// Kafka never holds Do: with a broker that takes the request and never
// answers, an operation that ends in a dead letter returns as soon as the
// letter is in the local journal, long before its caller's deadline, and the
// letter waits there. On the old Kafka dead-letter sink, Do waited for
// Kafka's acknowledgement: 4.0 s with no broker, 3.8 s past the caller's
// 200 ms deadline.
func TestKafkaNeverHoldsDo(t *testing.T) {
	c, client := cluster(t)
	c.ControlKey(kmsg.Produce.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		c.SleepControl(func() { select {} })
		return nil, nil, false
	})
	journal := openJournal(t)
	f := &Forwarder{Journal: journal, Client: client, Topic: dlq, CloseTimeout: 300 * time.Millisecond}
	go f.Run(context.Background())
	p := fixtures.SMS()
	ex := retry.New(watch.NewStatic(p), retry.WithClock(clock.Real{}), retry.WithDeadLetters(journal))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for i := range 5 {
		err := ex.Do(ctx, p.Policy.Name, retry.Vars{"user_id": strconv.Itoa(i), "login_session_id": "s"},
			func(context.Context, retry.Attempt) error { return retry.Status(400, "") })
		if ctx.Err() != nil {
			t.Fatalf("Do %d returned only once the caller's deadline had passed: %v", i, err)
		}
		if err == nil || strings.Contains(err.Error(), "not stored") {
			t.Fatalf("Do %d: %v", i, err)
		}
	}
	var err error
	within(t, "Forwarder.Close with the broker silent", func() { err = f.Close() })
	if err == nil || !strings.Contains(err.Error(), "5 dead letters") {
		t.Fatalf("Close: %v", err)
	}
	if left, _ := journal.Unforwarded(); left != 5 || f.Forwarded() != 0 {
		t.Fatalf("%d letters left in the journal, %d forwarded", left, f.Forwarded())
	}
}

// The broker is killed mid-run while letters go on being written, and
// started again on the same address: every letter reaches the topic, keyed
// by its identity, and the journal has none left.
func TestEveryLetterIsDeliveredOnceTheBrokerIsBack(t *testing.T) {
	b := newBroker(t)
	client, err := kgo.NewClient(kgo.SeedBrokers(b.addr()), kgo.RetryBackoffFn(func(int) time.Duration { return 50 * time.Millisecond }))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	journal := openJournal(t)
	f := &Forwarder{Journal: journal, Client: client, Topic: dlq}
	go f.Run(context.Background())
	const letters = 600
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := w; i < letters; i += 4 {
				if err := journal.Write(context.Background(), letterOf(i)); err != nil {
					t.Error(err)
				}
				if i == letters/3 {
					b.kill() // mid-run, with batches in flight
				}
			}
		})
	}
	wg.Wait()
	if left, _ := journal.Unforwarded(); left == 0 {
		t.Fatal("every letter was forwarded with the broker down: it was not killed mid-run")
	}
	b.start()
	waitFor(t, "every letter forwarded", func() bool { left, _ := journal.Unforwarded(); return left == 0 })
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	keys := consumeKeys(t, b.addr(), letters)
	for i := range letters {
		if keys[deadletter.Identity(letterOf(i))] == 0 {
			t.Fatalf("letter %d never reached the topic (%d of %d did)", i, len(keys), letters)
		}
	}
}

// A process that writes letters to its journal and forwards them is killed
// (SIGKILL) round after round, with the broker killed and restarted between
// rounds; a last process forwards what is left. Every letter a round saw
// acknowledged by the journal is on the topic: only duplicates may follow.
func TestAForwarderKilledAnywhereLosesNoLetter(t *testing.T) {
	if path := os.Getenv("FORWARDER_JOURNAL"); path != "" {
		forwarderChild(t, path)
		return
	}
	b := newBroker(t)
	path := filepath.Join(t.TempDir(), "dead.journal")
	acked := map[int]bool{}
	for round := range 4 {
		if round == 2 {
			b.kill()
			b.start()
		}
		cmd := exec.Command(os.Args[0], "-test.run", "^TestAForwarderKilledAnywhereLosesNoLetter$")
		cmd.Env = append(os.Environ(), "FORWARDER_JOURNAL="+path, "FORWARDER_BROKER="+b.addr(), fmt.Sprintf("FORWARDER_FROM=%d", round*10_000))
		if round == 3 {
			cmd.Env = append(cmd.Env, "FORWARDER_FROM=-1") // write nothing, forward the rest, exit
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := bufio.NewScanner(out)
		for seen := 0; lines.Scan(); seen++ {
			op, ok := strings.CutPrefix(lines.Text(), "acked ")
			if !ok {
				t.Fatalf("round %d: %s", round, lines.Text())
			}
			n, _ := strconv.Atoi(op)
			acked[n] = true
			if round < 3 && seen == 150+60*round {
				_ = cmd.Process.Kill()
			}
		}
		if err := cmd.Wait(); round == 3 && err != nil {
			t.Fatalf("the last forwarder: %v", err)
		}
	}
	keys := consumeKeys(t, b.addr(), len(acked))
	for op := range acked {
		if keys[deadletter.Identity(letterOf(op))] == 0 {
			t.Fatalf("acknowledged letter %d never reached the topic (%d of %d did)", op, len(keys), len(acked))
		}
	}
}

// forwarderChild writes letters from FORWARDER_FROM on and forwards them
// until killed; from -1 it forwards what is left and exits.
func forwarderChild(t *testing.T, path string) {
	journal, err := deadletter.Open(path)
	if err != nil {
		fmt.Println("open", err)
		os.Exit(2)
	}
	client, err := kgo.NewClient(kgo.SeedBrokers(os.Getenv("FORWARDER_BROKER")))
	if err != nil {
		fmt.Println("client", err)
		os.Exit(2)
	}
	f := &Forwarder{Journal: journal, Client: client, Topic: dlq, CloseTimeout: 3 * watchdog}
	go f.Run(context.Background())
	from, _ := strconv.Atoi(os.Getenv("FORWARDER_FROM"))
	if from < 0 {
		if err := f.Close(); err != nil {
			fmt.Println("close", err)
			os.Exit(3)
		}
		os.Exit(0)
	}
	var out sync.Mutex
	for w := range 4 {
		go func() {
			for i := from + w; ; i += 4 {
				if err := journal.Write(context.Background(), letterOf(i)); err != nil {
					fmt.Println("write", err)
					os.Exit(3)
				}
				out.Lock()
				fmt.Printf("acked %d\n", i)
				out.Unlock()
			}
		}()
	}
	select {}
}

// BenchmarkForwarder ships b.N letters, written to the journal beforehand,
// to an in-process broker (kfake) on loopback, and reports letters/s: each
// batch waits for Kafka's acknowledgement of every record and for the
// forwarded mark's fsync (docs/benchmarks.md).
func BenchmarkForwarder(b *testing.B) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, dlq))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	client, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		b.Fatal(err)
	}
	defer client.Close()
	journal, err := deadletter.Open(filepath.Join(b.TempDir(), "dead.journal"))
	if err != nil {
		b.Fatal(err)
	}
	defer journal.Close()
	var wg sync.WaitGroup
	var next atomic.Int64
	for range 16 {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
				if err := journal.Write(context.Background(), letterOf(int(i))); err != nil {
					b.Error(err)
				}
			}
		})
	}
	wg.Wait()
	f := &Forwarder{Journal: journal, Client: client, Topic: dlq, CloseTimeout: time.Hour}
	b.ReportAllocs()
	b.ResetTimer()
	if err := f.Close(); err != nil { // Close drains the journal
		b.Fatal(err)
	}
	b.StopTimer()
	if f.Forwarded() != uint64(b.N) {
		b.Fatalf("%d of %d letters forwarded", f.Forwarded(), b.N)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "letters/s")
}
