package deadletter

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/retryguard/retryguard/runtime/retry"
)

// lowCompaction compacts the journal after 4 KiB of forwarded letters, so
// that a test sees many compactions.
func lowCompaction(t testing.TB) {
	old := compactBytes
	compactBytes = 4 << 10
	t.Cleanup(func() { compactBytes = old })
}

// forwardAll forwards until nothing is waiting, and returns the operations
// sent, in order.
func forwardAll(t testing.TB, j *Journal, batch int) []uint64 {
	t.Helper()
	var sent []uint64
	for {
		n, err := j.Forward(batch, func(letters []retry.DeadLetter) error {
			sent = append(sent, operations(letters)...)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return sent
		}
	}
}

// Forward passes every letter once, in order, and the mark survives a
// reopen: nothing is passed again. Once enough is forwarded, the journal is
// compacted, so it does not grow while letters are forwarded.
func TestForwardPassesEachLetterOnceAndCompacts(t *testing.T) {
	lowCompaction(t)
	path := filepath.Join(t.TempDir(), "dead.journal")
	j, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	var sent []uint64
	for round := range 20 {
		for i := range 10 {
			if err := j.Write(context.Background(), letter(round*10+i)); err != nil {
				t.Fatal(err)
			}
		}
		sent = append(sent, forwardAll(t, j, 7)...)
		if fi, _ := os.Stat(path); fi.Size() > 3*compactBytes {
			t.Fatalf("round %d: the journal is %d bytes with everything forwarded", round, fi.Size())
		}
	}
	for i, op := range sent {
		if op != uint64(i) {
			t.Fatalf("letter %d forwarded as operation %d: %v", i, op, sent)
		}
	}
	if len(sent) != 200 {
		t.Fatalf("%d of 200 letters forwarded", len(sent))
	}
	if err := j.Write(context.Background(), letter(200)); err != nil {
		t.Fatal(err)
	}
	_ = j.Close()
	j, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if again := forwardAll(t, j, 100); fmt.Sprint(again) != "[200]" {
		t.Fatalf("after a reopen, forwarded %v; only 200 was not forwarded", again)
	}
}

// When send fails, nothing is marked: the same letters come again.
func TestAFailedSendIsForwardedAgain(t *testing.T) {
	j, err := Open(filepath.Join(t.TempDir(), "dead.journal"))
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	for i := range 3 {
		_ = j.Write(context.Background(), letter(i))
	}
	broken := errors.New("broker down")
	if n, err := j.Forward(10, func([]retry.DeadLetter) error { return broken }); n != 0 || !errors.Is(err, broken) {
		t.Fatalf("a failed send: %d, %v", n, err)
	}
	if left, _ := j.Unforwarded(); left != 3 {
		t.Fatalf("%d letters left after a failed send", left)
	}
	if sent := forwardAll(t, j, 10); fmt.Sprint(sent) != "[0 1 2]" {
		t.Fatalf("after a failed send: %v", sent)
	}
}

// A mark whose frame is not there counts for nothing: here the journal was
// replaced by hand with other letters (and the new file may well have the
// old one's inode), and every one of them is forwarded, none skipped.
func TestAStaleMarkForwardsEverythingAgain(t *testing.T) {
	path := writeJournal(t, 3)
	j, _ := Open(path)
	forwardAll(t, j, 10)
	_ = j.Close()
	other := filepath.Join(t.TempDir(), "other.journal")
	o, _ := Open(other)
	for i := 10; i < 15; i++ {
		_ = o.Write(context.Background(), letter(i))
	}
	_ = o.Close()
	data, _ := os.ReadFile(other)
	_ = os.Remove(path)
	_ = os.WriteFile(path, data, 0o600)
	j, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if sent := forwardAll(t, j, 10); fmt.Sprint(sent) != "[10 11 12 13 14]" {
		t.Fatalf("after the journal was replaced: %v", sent)
	}
}

// Writers and the forwarder run together while the journal compacts again
// and again: every acknowledged letter is forwarded, at least once.
func TestCompactionWhileWritingLosesNothing(t *testing.T) {
	lowCompaction(t)
	path := filepath.Join(t.TempDir(), "dead.journal")
	j, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	const writers, each = 8, 100
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				if err := j.Write(context.Background(), letter(w*each+i)); err != nil {
					t.Error(err)
				}
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	seen := map[uint64]bool{}
	for finished := false; !finished; {
		select {
		case <-done:
			finished = true
		default:
		}
		for _, op := range forwardAll(t, j, 16) {
			seen[op] = true
		}
	}
	_ = j.Close()
	if len(seen) != writers*each {
		t.Fatalf("%d of %d letters forwarded", len(seen), writers*each)
	}
	if fi, _ := os.Stat(path); fi.Size() > 3*compactBytes {
		t.Fatalf("the journal is %d bytes with everything forwarded", fi.Size())
	}
}

// A process that writes letters and forwards them (here to its standard
// output, the queue) is killed (SIGKILL) round after round, at any point of
// writing, forwarding, marking or compacting. Every letter any round saw
// acknowledged reaches the queue, at least once, by the end.
func TestKilledAnywhereWhileForwardingLosesNoLetter(t *testing.T) {
	if path := os.Getenv("DEADLETTER_OUTBOX"); path != "" {
		outboxChild(path)
		return
	}
	path := filepath.Join(t.TempDir(), "dead.journal")
	acked, queued := map[uint64]bool{}, map[uint64]bool{}
	run := func(round int, from, killAfter int) {
		cmd, lines := startChild(t, "TestKilledAnywhereWhileForwardingLosesNoLetter", "DEADLETTER_OUTBOX="+path, fmt.Sprintf("DEADLETTER_FROM=%d", from))
		seen := 0
		for lines.Scan() {
			childLine(t, round, lines.Text(), acked, queued)
			if seen++; killAfter > 0 && seen == killAfter {
				_ = cmd.Process.Kill()
			}
		}
		_ = cmd.Wait()
	}
	for round := range 6 {
		run(round, round*100_000, 300+97*round)
	}
	run(6, 600_000, 0) // the last round writes nothing and forwards the rest
	for op := range acked {
		if !queued[op] {
			t.Fatalf("acknowledged letter %d never reached the queue (%d acknowledged, %d queued)", op, len(acked), len(queued))
		}
	}
}

// outboxChild writes letters from four goroutines and forwards them to
// standard output, a line per letter, until killed; with DEADLETTER_FROM
// of 600000 it only forwards what is left, and exits.
func outboxChild(path string) {
	compactBytes = 4 << 10
	j, err := Open(path)
	if err != nil {
		fmt.Println("open", err)
		os.Exit(2)
	}
	from, _ := strconv.Atoi(os.Getenv("DEADLETTER_FROM"))
	var out sync.Mutex
	say := func(kind string, op uint64) {
		out.Lock()
		fmt.Printf("%s %d\n", kind, op)
		out.Unlock()
	}
	send := func(letters []retry.DeadLetter) error {
		for _, l := range letters {
			say("queued", l.OperationID)
		}
		return nil
	}
	if from == 600_000 {
		for {
			n, err := j.Forward(64, send)
			if err != nil {
				fmt.Println("forward", err)
				os.Exit(3)
			}
			if n == 0 {
				os.Exit(0)
			}
		}
	}
	for w := range 4 {
		go func() {
			for i := from + w; ; i += 4 {
				if err := j.Write(context.Background(), letter(i)); err != nil {
					fmt.Println("write", err)
					os.Exit(3)
				}
				say("acked", uint64(i))
			}
		}()
	}
	for {
		if _, err := j.Forward(16, send); err != nil {
			fmt.Println("forward", err)
			os.Exit(3)
		}
	}
}
