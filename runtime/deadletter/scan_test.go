package deadletter

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/retryguard/retryguard/runtime/retry"
)

// Scan passes the letters oldest first and stops when told, so that a
// reader can page through a journal of any size one letter at a time;
// Unforwarded still counts every letter not yet forwarded, and neither
// changes what Forward ships.
func TestScanStopsWhenToldAndReadsInOrder(t *testing.T) {
	j := openWritten(t, filepath.Join(t.TempDir(), "dead.journal"), 10)
	var got []retry.DeadLetter
	if err := j.Scan(func(l retry.DeadLetter) bool { got = append(got, l); return len(got) < 4 }); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(operations(got)) != "[0 1 2 3]" {
		t.Fatalf("Scan passed %v, want the first four", operations(got))
	}
	if _, err := j.Forward(3, func([]retry.DeadLetter) error { return nil }); err != nil {
		t.Fatal(err)
	}
	got = nil
	if err := j.Scan(func(l retry.DeadLetter) bool { got = append(got, l); return true }); err != nil {
		t.Fatal(err)
	}
	if n, err := j.Unforwarded(); n != 7 || err != nil || len(got) != 10 {
		t.Fatalf("Unforwarded %d (%v), Scan %d letters; want 7 of 10", n, err, len(got))
	}
	if _, err := j.Forward(0, func([]retry.DeadLetter) error { t.Fatal("Forward(0) sent letters"); return nil }); err != nil {
		t.Fatal(err)
	}
}
