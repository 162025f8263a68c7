package deadletter

import (
	"bytes"
	"context"
	"os"
	"testing"
)

// Issue 20, item 3: the journal "never grows without bound while Kafka is
// up". One flipped byte anywhere (a bad sector, a stray write) disables
// compaction for the life of the file: every letter is forwarded, yet the
// journal keeps every byte ever written.
func TestReviewDamagedJournalStillCompacts(t *testing.T) {
	lowCompaction(t)
	path := writeJournal(t, 10)
	data, _ := os.ReadFile(path)
	at := bytes.Index(data, []byte(`"SMS-2FA-4"`))
	data[at+1] ^= 0x20
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	j, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	for round := range 100 {
		for i := range 10 {
			if err := j.Write(context.Background(), letter(1000+round*10+i)); err != nil {
				t.Fatal(err)
			}
		}
		forwardAll(t, j, 64) // Kafka is up: everything is forwarded
	}
	if n, err := j.Unforwarded(); err != nil || n != 0 {
		t.Fatalf("unforwarded %d, %v", n, err)
	}
	if fi, _ := os.Stat(path); fi.Size() > 3*compactBytes {
		t.Fatalf("journal is %d bytes with every letter forwarded (compaction at %d): a damaged journal grows without bound",
			fi.Size(), compactBytes)
	}
}
