package deadletter

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"

	"github.com/retryguard/retryguard/runtime/retry"
)

// Issue 29: "The journal grows until the pod is evicted." A journal with a
// cap never grows past it: a letter that does not fit is refused with
// ErrFull and nothing of it is written, every letter acknowledged before is
// kept, and once the forwarder has taken the letters and compaction freed
// them, letters fit again.
func TestACappedJournalRefusesWhatDoesNotFitAndRecovers(t *testing.T) {
	lowCompaction(t)
	const maxBytes = 16 << 10
	path := filepath.Join(t.TempDir(), "dead.journal")
	j, err := Open(path, WithMaxBytes(maxBytes))
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	var mu sync.Mutex
	var kept, full int
	var wg sync.WaitGroup
	for w := range 8 { // concurrent writers: the cap holds across one group commit
		wg.Go(func() {
			for i := range 100 {
				err := j.Write(context.Background(), letter(w*1000+i))
				mu.Lock()
				switch {
				case err == nil:
					kept++
				case errors.Is(err, ErrFull):
					full++
				default:
					t.Error(err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if size := fileSize(path); size > maxBytes || full == 0 {
		t.Fatalf("the journal is %d bytes with a cap of %d; %d letters refused", size, maxBytes, full)
	}
	if got, err := ReadAll(path); len(got) != kept || err != nil {
		t.Fatalf("%d letters in the journal, %d acknowledged (%v)", len(got), kept, err)
	}
	sent := 0
	for {
		n, err := j.Forward(64, func(l []retry.DeadLetter) error { sent += len(l); return nil })
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
	}
	if sent != kept {
		t.Fatalf("forwarded %d of %d", sent, kept)
	}
	if err := j.Write(context.Background(), letter(1_000_000)); err != nil {
		t.Fatalf("after forwarding and compaction, %v", err)
	}
}
