package deadletter

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// A zero-filled tail, what a power cut leaves when the file's new size
// reached the disk before its data, is a torn tail: after the last intact
// frame, nothing or a prefix of one frame, then zeroes. Open cuts it and
// reports nothing; ReadAll reports nothing either. On the old journal it
// was damage, reported forever.
func TestZeroFilledTailIsCut(t *testing.T) {
	whole, _ := os.ReadFile(writeJournal(t, 4))
	three, _ := os.ReadFile(writeJournal(t, 3))
	for _, cut := range []int{len(three), len(three) + 1, len(three) + 4, len(three) + 16, len(three) + 40, len(whole) - 1} {
		for _, zeroes := range []int{1, 15, 16, 200, 5000} {
			path := filepath.Join(t.TempDir(), "dead.journal")
			data := append(append([]byte(nil), whole[:cut]...), make([]byte, zeroes)...)
			_ = os.WriteFile(path, data, 0o600)
			if got, err := ReadAll(path); len(got) != 3 || err != nil {
				t.Fatalf("cut at %d, %d zeroes: ReadAll %d records, %v", cut, zeroes, len(got), err)
			}
			j, err := Open(path)
			if err != nil {
				t.Fatalf("cut at %d, %d zeroes: %v", cut, zeroes, err)
			}
			if err := j.Damage(); err != nil {
				t.Fatalf("cut at %d, %d zeroes: reported as damage: %v", cut, zeroes, err)
			}
			_ = j.Write(context.Background(), letter(9))
			_ = j.Close()
			if got, err := ReadAll(path); fmt.Sprint(operations(got)) != "[0 1 2 9]" || err != nil {
				t.Fatalf("cut at %d, %d zeroes: %v after repair, %v", cut, zeroes, operations(got), err)
			}
		}
	}
}

// Zeroes after a damaged last record are not a torn tail: the record's
// bytes are all there, so the damage is kept and reported.
func TestZeroesAfterADamagedRecordAreDamage(t *testing.T) {
	path := writeJournal(t, 5)
	data, _ := os.ReadFile(path)
	at := bytes.Index(data, []byte(`"SMS-2FA-4"`))
	data[at+1] ^= 0x20
	data = append(data, make([]byte, 100)...)
	_ = os.WriteFile(path, data, 0o600)
	j, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if j.Damage() == nil {
		t.Fatal("a damaged record followed by zeroes was cut as a torn tail")
	}
	if fi, _ := os.Stat(path); fi.Size() != int64(len(data)) {
		t.Fatalf("Open cut the journal from %d to %d bytes", len(data), fi.Size())
	}
}
