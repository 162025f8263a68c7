package deadletter

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/retryguard/retryguard/runtime/retry"
)

// writeJournal writes n letters to a new journal and returns its path.
func writeJournal(t *testing.T, n int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "dead.journal")
	j, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := j.Write(context.Background(), letter(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// operations lists the operation numbers of letters, in order.
func operations(letters []retry.DeadLetter) []uint64 {
	out := make([]uint64, 0, len(letters))
	for _, l := range letters {
		out = append(out, l.OperationID)
	}
	return out
}

// One flipped byte in record 50 of 100 is reported with its offset, and the
// 50 records after it are still read, before and after a reopen; Open cuts
// nothing, and appending goes on after the damage.
func TestMidFileCorruptionIsReportedAndLaterRecordsSurvive(t *testing.T) {
	path := writeJournal(t, 100)
	data, _ := os.ReadFile(path)
	at := bytes.Index(data, []byte(`"SMS-2FA-49"`))
	if at < 0 {
		t.Fatal("record 50 not found")
	}
	data[at+1] ^= 0x20 // S becomes s: the frame is intact in length, wrong in content
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}

	got, err := ReadAll(path)
	if len(got) != 99 {
		t.Fatalf("%d of the 99 intact records read: %v", len(got), err)
	}
	if err == nil || !strings.Contains(err.Error(), "offset") {
		t.Fatalf("the damage was not reported with its offset: %v", err)
	}
	for i, op := range operations(got) {
		want := uint64(i)
		if i >= 49 {
			want++
		}
		if op != want {
			t.Fatalf("record %d is operation %d, want %d", i, op, want)
		}
	}

	j, err := Open(path)
	if err != nil {
		t.Fatalf("a journal with a damaged record must still open: %v", err)
	}
	var corrupt *CorruptError
	if !errors.As(j.Damage(), &corrupt) || len(corrupt.Regions) != 1 || corrupt.Regions[0].Offset > int64(at) ||
		corrupt.Regions[0].Offset+corrupt.Regions[0].Length <= int64(at) {
		t.Fatalf("Open reported %v, the flipped byte is at %d", j.Damage(), at)
	}
	if fi, _ := os.Stat(path); fi.Size() < int64(len(data)) {
		t.Fatalf("Open cut the journal from %d to %d bytes", len(data), fi.Size())
	}
	if err := j.Write(context.Background(), letter(100)); err != nil {
		t.Fatal(err)
	}
	_ = j.Close()
	got, err = ReadAll(path)
	if len(got) != 100 || got[99].OperationID != 100 || err == nil {
		t.Fatalf("%d records after an append behind the damage (%v)", len(got), err)
	}
}

// A damaged last record is damage, not a torn tail: Open keeps its bytes,
// and ReadAll goes on reporting it.
func TestDamagedLastRecordIsNotCut(t *testing.T) {
	path := writeJournal(t, 5)
	data, _ := os.ReadFile(path)
	at := bytes.Index(data, []byte(`"SMS-2FA-4"`))
	data[at+1] ^= 0x20
	_ = os.WriteFile(path, data, 0o600)
	j, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	_ = j.Write(context.Background(), letter(5))
	_ = j.Close()
	after, _ := os.ReadFile(path)
	if !bytes.HasPrefix(after, data) {
		t.Fatal("Open rewrote or cut the damaged last record")
	}
	got, err := ReadAll(path)
	if fmt.Sprint(operations(got)) != "[0 1 2 3 5]" || err == nil {
		t.Fatalf("read %v, %v", operations(got), err)
	}
}

// A torn tail is any prefix of the last frame: Open cuts it, every complete
// record stays, nothing is reported, and writing goes on after them.
func TestTornTailIsCutWherever(t *testing.T) {
	whole, _ := os.ReadFile(writeJournal(t, 4))
	three, _ := os.ReadFile(writeJournal(t, 3))
	for cut := len(three) + 1; cut < len(whole); cut++ {
		path := filepath.Join(t.TempDir(), "dead.journal")
		_ = os.WriteFile(path, whole[:cut], 0o600)
		got, err := ReadAll(path)
		if len(got) != 3 || err != nil {
			t.Fatalf("cut at %d: ReadAll %d records, %v", cut, len(got), err)
		}
		j, err := Open(path)
		if err != nil {
			t.Fatalf("cut at %d: %v", cut, err)
		}
		_ = j.Write(context.Background(), letter(9))
		_ = j.Close()
		got, err = ReadAll(path)
		if fmt.Sprint(operations(got)) != "[0 1 2 9]" || err != nil {
			t.Fatalf("cut at %d: %v after repair, %v", cut, operations(got), err)
		}
	}
}

// A write that fails mid-frame (here EFBIG under a file-size limit, as
// ENOSPC would) does not poison later writes: once space is back, every
// acknowledged write survives a reopen. A child process carries the limit.
func TestPartialWriteDoesNotPoisonLaterWrites(t *testing.T) {
	if path := os.Getenv("DEADLETTER_FSIZE_CHILD"); path != "" {
		fsizeChild(path)
		return
	}
	path := filepath.Join(t.TempDir(), "dead.journal")
	cmd := exec.Command(os.Args[0], "-test.run", "^TestPartialWriteDoesNotPoisonLaterWrites$")
	cmd.Env = append(os.Environ(), "DEADLETTER_FSIZE_CHILD="+path)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	var acked []string
	refused := false
	for _, line := range splitLines(string(out)) {
		if op, ok := strings.CutPrefix(line, "acked "); ok {
			acked = append(acked, op)
		}
		refused = refused || strings.HasPrefix(line, "refused")
	}
	if !refused || len(acked) != 15 {
		t.Fatalf("the child should see one refusal and 15 acknowledgements:\n%s", out)
	}
	got, err := ReadAll(path)
	var ops []string
	for _, l := range got {
		ops = append(ops, fmt.Sprint(l.OperationID))
	}
	if fmt.Sprint(ops) != fmt.Sprint(acked) || err != nil {
		t.Fatalf("read back %v, acknowledged %v: %v", ops, acked, err)
	}
}

func fsizeChild(path string) {
	signal.Ignore(syscall.SIGXFSZ) // so that write returns EFBIG
	var limit syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &limit); err != nil {
		fmt.Println("getrlimit", err)
		os.Exit(2)
	}
	j, err := Open(path)
	if err != nil {
		fmt.Println("open", err)
		os.Exit(2)
	}
	write := func(i int) error {
		err := j.Write(context.Background(), letter(i))
		if err == nil {
			fmt.Println("acked", i)
		}
		return err
	}
	for i := range 5 {
		if write(i) != nil {
			os.Exit(3)
		}
	}
	fi, _ := os.Stat(path)
	full := limit
	full.Cur = uint64(fi.Size()) + 40 // the next frame fits only in part
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &full); err != nil {
		fmt.Println("setrlimit", err)
		os.Exit(2)
	}
	if err := write(5); err != nil {
		fmt.Println("refused", err)
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &limit); err != nil { // space is back
		fmt.Println("setrlimit", err)
		os.Exit(2)
	}
	for i := 6; i < 16; i++ {
		if write(i) != nil {
			os.Exit(4)
		}
	}
	os.Exit(0) // no Close
}

// Round after round, a child appends to one journal and is killed (SIGKILL)
// while writing; every write any round saw acknowledged is read back, and
// nothing is reported damaged.
func TestKilledWhileWritingRoundAfterRound(t *testing.T) {
	if path := os.Getenv("DEADLETTER_WRITER"); path != "" {
		j, err := Open(path)
		if err != nil {
			fmt.Println("open", err)
			os.Exit(2)
		}
		from, _ := strconv.Atoi(os.Getenv("DEADLETTER_FROM"))
		for i := from; i < from+100_000; i++ {
			if err := j.Write(context.Background(), letter(i)); err != nil {
				fmt.Println("write", err)
				os.Exit(3)
			}
			fmt.Println("acked", i)
		}
		os.Exit(4)
	}
	path := filepath.Join(t.TempDir(), "dead.journal")
	acked := map[uint64]bool{}
	for round := range 5 {
		cmd, lines := startChild(t, "TestKilledWhileWritingRoundAfterRound", "DEADLETTER_WRITER="+path, fmt.Sprintf("DEADLETTER_FROM=%d", round*100_000))
		seen := 0
		for lines.Scan() {
			op, ok := strings.CutPrefix(lines.Text(), "acked ")
			if !ok {
				t.Fatalf("round %d: %s", round, lines.Text())
			}
			n, _ := strconv.ParseUint(op, 10, 64)
			acked[n] = true
			if seen++; seen == 10+7*round {
				_ = cmd.Process.Kill()
			}
		}
		_ = cmd.Wait()
	}
	got, err := ReadAll(path)
	if err != nil {
		t.Fatal(err)
	}
	read := map[uint64]bool{}
	for _, l := range got {
		read[l.OperationID] = true
	}
	for op := range acked {
		if !read[op] {
			t.Fatalf("acknowledged operation %d is lost (%d acknowledged, %d read)", op, len(acked), len(got))
		}
	}
}
