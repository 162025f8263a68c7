package deadletter

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/retryguard/retryguard/contract/limits"
	"github.com/retryguard/retryguard/runtime/retry"
)

func letter(i int) retry.DeadLetter {
	return retry.DeadLetter{OperationID: uint64(i), Policy: "sms-2fa-dispatch", Key: fmt.Sprintf("SMS-2FA-%d", i),
		State: retry.UnknownOutcome, Code: "ERR_UNKNOWN_OUTCOME",
		Attempts: []retry.AttemptRecord{{Attempt: 1, Evidence: retry.Evidence{Class: retry.Ambiguous, Transport: limits.Timeout, Dispatched: true}}}}
}

func TestConcurrentWritesAreAllKept(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dead.journal")
	j, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Go(func() {
			if err := j.Write(context.Background(), letter(i)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	_ = j.Close()
	got, err := ReadAll(path)
	if err != nil || len(got) != 200 {
		t.Fatalf("%d records, %v", len(got), err)
	}
	seen := map[uint64]bool{}
	for _, l := range got {
		seen[l.OperationID] = true
		if l.Attempts[0].Evidence.Transport != limits.Timeout {
			t.Fatalf("record lost its evidence: %+v", l)
		}
	}
	if len(seen) != 200 {
		t.Fatalf("%d distinct operations", len(seen))
	}
}

// The journal survives a process restart: a child process writes and is
// killed, and every record it saw acknowledged is read back.
func TestSurvivesProcessRestart(t *testing.T) {
	if os.Getenv("DEADLETTER_CHILD") != "" {
		j, err := Open(os.Getenv("DEADLETTER_CHILD"))
		if err != nil {
			os.Exit(2)
		}
		for i := range 50 {
			if err := j.Write(context.Background(), letter(i)); err != nil {
				os.Exit(3)
			}
			fmt.Println("acked", i)
		}
		_ = os.Stdout.Sync()
		p, _ := os.FindProcess(os.Getpid())
		_ = p.Kill() // no Close, no clean shutdown
		select {}
	}
	path := filepath.Join(t.TempDir(), "dead.journal")
	cmd := exec.Command(os.Args[0], "-test.run", "^TestSurvivesProcessRestart$")
	cmd.Env = append(os.Environ(), "DEADLETTER_CHILD="+path)
	out, _ := cmd.Output()
	acked := 0
	for _, line := range splitLines(string(out)) {
		if len(line) > 5 && line[:5] == "acked" {
			acked++
		}
	}
	if acked != 50 {
		t.Fatalf("the child acknowledged %d writes:\n%s", acked, out)
	}
	got, err := ReadAll(path)
	if err != nil || len(got) != acked {
		t.Fatalf("%d of %d acknowledged records after a restart: %v", len(got), acked, err)
	}
}

func splitLines(s string) []string {
	var out []string
	start := 0
	for i := range len(s) {
		if s[i] == '\n' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return out
}

// startChild runs the test named test of this test binary in a child
// process, with env added, and returns it with a scanner of its standard
// output.
func startChild(t *testing.T, test string, env ...string) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run", "^"+test+"$")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, bufio.NewScanner(out)
}
