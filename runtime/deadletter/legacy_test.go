package deadletter

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/retryguard/retryguard/runtime/retry"
)

// legacyFrame frames l as format 1 did: a 4-byte big-endian length, the
// CRC-32C of the body, and the body, with no file header and no marker.
func legacyFrame(l retry.DeadLetter) []byte {
	body, _ := json.Marshal(l)
	frame := binary.BigEndian.AppendUint32(nil, uint32(len(body)))
	frame = binary.BigEndian.AppendUint32(frame, crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli)))
	return append(frame, body...)
}

func legacyJournal(t *testing.T, n int) (string, []byte) {
	var data []byte
	for i := range n {
		data = append(data, legacyFrame(letter(i))...)
	}
	path := filepath.Join(t.TempDir(), "dead.journal")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path, data
}

// A journal written in format 1 is read, and Open converts it to the
// current format with every record, so that appending goes on.
func TestLegacyJournalIsReadAndConverted(t *testing.T) {
	path, data := legacyJournal(t, 3)
	if err := os.WriteFile(path, append(data, legacyFrame(letter(3))[:20]...), 0o600); err != nil { // and a torn tail
		t.Fatal(err)
	}
	got, err := ReadAll(path)
	if fmt.Sprint(operations(got)) != "[0 1 2]" || err != nil {
		t.Fatalf("format 1: %v, %v", operations(got), err)
	}
	j, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	_ = j.Write(context.Background(), letter(4))
	_ = j.Close()
	converted, _ := os.ReadFile(path)
	if !bytes.HasPrefix(converted, fileHeader[:]) {
		t.Fatalf("not converted: % x", converted[:8])
	}
	got, err = ReadAll(path)
	if fmt.Sprint(operations(got)) != "[0 1 2 4]" || err != nil {
		t.Fatalf("after conversion: %v, %v", operations(got), err)
	}
}

// A format 1 journal damaged in the middle cannot be resynchronised, so Open
// refuses it, naming the offset, and leaves it untouched.
func TestDamagedLegacyJournalIsRefused(t *testing.T) {
	path, data := legacyJournal(t, 4)
	at := bytes.Index(data, []byte(`"SMS-2FA-1"`))
	data[at+1] ^= 0x20
	_ = os.WriteFile(path, data, 0o600)
	if _, err := Open(path); err == nil || !strings.Contains(err.Error(), "offset") {
		t.Fatalf("Open: %v", err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(after, data) {
		t.Fatal("Open changed a journal it refused")
	}
	got, err := ReadAll(path)
	if fmt.Sprint(operations(got)) != "[0]" || err == nil {
		t.Fatalf("ReadAll: %v, %v", operations(got), err)
	}
}

// A journal of a format this build does not know is refused, not appended to.
func TestUnknownFormatVersionIsRefused(t *testing.T) {
	path := writeJournal(t, 1)
	data, _ := os.ReadFile(path)
	data[len(fileHeader)-1]++
	_ = os.WriteFile(path, data, 0o600)
	if _, err := Open(path); err == nil || !strings.Contains(err.Error(), "version") {
		t.Fatalf("Open: %v", err)
	}
}
