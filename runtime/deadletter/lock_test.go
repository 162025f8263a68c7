package deadletter

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A second Open of a journal in the same process is refused while the
// first is open, and allowed once it is closed. On the old journal, which
// took no lock, two Opens of one file both wrote, and each one's rollback
// and torn-tail cut truncated the other's frames: 6 writes acknowledged,
// 3 read back.
func TestASecondOpenInTheSameProcessIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dead.journal")
	first, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	second, err := Open(path)
	if !errors.Is(err, ErrLocked) || second != nil {
		t.Fatalf("a second Open while the first is open: %v", err)
	}
	if !strings.Contains(err.Error(), path) {
		t.Fatalf("the refusal does not name the journal: %v", err)
	}
	for i := range 3 {
		if err := first.Write(context.Background(), letter(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := Open(path)
	if err != nil {
		t.Fatalf("Open after Close: %v", err)
	}
	_ = again.Close()
	if got, err := ReadAll(path); len(got) != 3 || err != nil {
		t.Fatalf("%d of 3 records, %v", len(got), err)
	}
}

// A journal another process holds is refused here, and the lock goes with
// that process: once it is killed (SIGKILL, no Close), Open succeeds, and
// every record it acknowledged is there. On the old journal two processes
// both opened one file: 6 acknowledged, 1 left, and 296 bytes damaged.
func TestASecondOpenInAnotherProcessIsRefusedUntilItDies(t *testing.T) {
	if path := os.Getenv("DEADLETTER_HOLDER"); path != "" {
		j, err := Open(path)
		if err != nil {
			fmt.Println("open", err)
			os.Exit(2)
		}
		for i := range 3 {
			if err := j.Write(context.Background(), letter(i)); err != nil {
				fmt.Println("write", err)
				os.Exit(3)
			}
		}
		fmt.Println("holding")
		select {} // until killed
	}
	path := filepath.Join(t.TempDir(), "dead.journal")
	cmd, lines := startChild(t, "TestASecondOpenInAnotherProcessIsRefusedUntilItDies", "DEADLETTER_HOLDER="+path)
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if !lines.Scan() || lines.Text() != "holding" {
		t.Fatalf("the holder: %q", lines.Text())
	}
	if j, err := Open(path); !errors.Is(err, ErrLocked) {
		if j != nil {
			_ = j.Close()
		}
		t.Fatalf("Open of a journal another process holds: %v", err)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	j, err := Open(path)
	if err != nil {
		t.Fatalf("Open after the holder was killed: %v", err)
	}
	if err := j.Write(context.Background(), letter(3)); err != nil {
		t.Fatal(err)
	}
	_ = j.Close()
	if got, err := ReadAll(path); fmt.Sprint(operations(got)) != "[0 1 2 3]" || err != nil {
		t.Fatalf("after the holder's death and one more write: %v, %v", operations(got), err)
	}
}

// ReadAll takes no lock: it reads a journal a writer holds open.
func TestReadAllReadsAJournalThatIsOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dead.journal")
	j, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if err := j.Write(context.Background(), letter(1)); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadAll(path); len(got) != 1 || err != nil {
		t.Fatalf("%d records, %v", len(got), err)
	}
}
