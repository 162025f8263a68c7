package deadletter

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/retryguard/retryguard/runtime/retry"
)

// Issue 20, item 3: the journal "never grows without bound while Kafka is
// up", and item 5: damage "is still kept and reported". One flipped byte (a
// bad sector, a stray write) must not stop compaction for the life of the
// file: the damaged region is carried into each new file and still reported.
func TestDamagedJournalStillCompacts(t *testing.T) {
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
	var open, read *CorruptError
	if _, err := ReadAll(path); !errors.As(j.Damage(), &open) || !errors.As(err, &read) || len(read.Regions) != 1 {
		t.Fatalf("after compaction the damage is not kept and reported: Damage() = %v, ReadAll: %v", j.Damage(), err)
	}
	if got, want := read.Regions[0].Length, open.Regions[0].Length; got != want {
		t.Fatalf("the damaged region is %d bytes on disk, Damage() says %d (%v, %v)", got, want, read, open)
	}
}

// Issue 20: "A kill -9 at any point loses no acknowledged letter", and "a
// second Open ... fails". When the directory's fsync fails after
// compaction renamed the new file over the journal, the journal must go on
// in the new file (whose lock it holds), never acknowledge a letter in the
// old one, now unlinked.
func TestCompactionDirSyncFailureGoesOnInTheNewFile(t *testing.T) {
	lowCompaction(t)
	path := t.TempDir() + "/dead.journal"
	j := openWritten(t, path, 100)
	old := syncFile
	t.Cleanup(func() { syncFile = old })
	syncFile = func(f *os.File) error {
		if fi, err := f.Stat(); err == nil && fi.IsDir() {
			return errors.New("EIO (injected: fsync of the directory)")
		}
		return old(f)
	}
	// 10 letters left unforwarded: compaction copies them to a new file.
	_, ferr := j.Forward(90, func([]retry.DeadLetter) error { return nil })
	syncFile = old
	if !errors.Is(ferr, ErrCompaction) {
		t.Fatalf("Forward with the directory's fsync failing: %v, want an error wrapping ErrCompaction", ferr)
	}
	for i := 100; i < 110; i++ {
		if err := j.Write(context.Background(), letter(i)); err != nil {
			t.Fatalf("Write %d: %v", i, err)
		}
	}
	if j2, err := Open(path); err == nil {
		_ = j2.Close()
		t.Errorf("a second Open of %s succeeded while the journal is open", path)
	}
	got, _ := ReadAll(path)
	for i := uint64(90); i < 110; i++ {
		if !contains(got, i) {
			t.Fatalf("letter %d was acknowledged by Write but is not in %s (%d letters there)", i, path, len(got))
		}
	}
}

// kill -9 at random moments (a timer, not a count of lines) of writing,
// forwarding and compacting: every acknowledged letter is queued by the
// end, the next Open never finds the lock held or the file damaged.
func TestRandomKillsLoseNothing(t *testing.T) {
	if path := os.Getenv("DEADLETTER_OUTBOX"); path != "" {
		outboxChild(path)
		return
	}
	path := t.TempDir() + "/dead.journal"
	acked, queued := map[uint64]bool{}, map[uint64]bool{}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	run := func(round, from int, after time.Duration) {
		cmd, lines := startChild(t, "TestRandomKillsLoseNothing", "DEADLETTER_OUTBOX="+path, fmt.Sprintf("DEADLETTER_FROM=%d", from))
		if after > 0 {
			timer := time.AfterFunc(after, func() { _ = cmd.Process.Kill() })
			defer timer.Stop()
		}
		for lines.Scan() {
			childLine(t, round, lines.Text(), acked, queued)
		}
		_ = cmd.Wait()
		if _, err := ReadAll(path); err != nil && !errors.Is(err, os.ErrNotExist) { // killed before its Open
			t.Fatalf("round %d (killed after %v): %v", round, after, err)
		}
	}
	for round := range 25 {
		run(round, round*100_000, time.Duration(20+rng.IntN(400))*time.Millisecond)
	}
	run(25, 600_000, 0)
	missing := 0
	for op := range acked {
		if !queued[op] {
			missing++
		}
	}
	if missing > 0 {
		t.Fatalf("%d of %d acknowledged letters never reached the queue", missing, len(acked))
	}
	t.Logf("%d acknowledged, %d queued", len(acked), len(queued))
}

// tinyDisk mounts a tmpfs of size bytes for the test, a disk that fills up
// for real. Mounting needs root (CAP_SYS_ADMIN): elsewhere the test skips.
func tinyDisk(t *testing.T, size int) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		t.Skipf("cannot mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir
}

// The guide: "Think in failures: ... disk full ... Fail safe means fewer
// retries and nothing lost"; issue 20: compaction keeps the journal from
// growing "while Kafka is up". A journal's disk fills while Kafka is away;
// Kafka comes back and takes every letter. The disk must then have room
// again: the mark is overwritten in place and the journal cut in place, so
// neither needs new space.
func TestFullDiskRecoversOnceEverythingIsForwarded(t *testing.T) {
	lowCompaction(t)
	path := tinyDisk(t, 64<<10) + "/dead.journal"
	j, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	written := 0
	for ; written < 100_000; written++ {
		if err := j.Write(context.Background(), letter(written)); err != nil {
			t.Logf("disk full after %d letters: %v", written, err)
			break
		}
	}
	sent := 0
	var ferr error
	for range 20 { // Kafka is back and takes everything
		n, err := j.Forward(64, func(l []retry.DeadLetter) error { sent += len(l); return nil })
		ferr = err
		if n == 0 && err == nil {
			break
		}
	}
	left, _ := j.Unforwarded()
	if err := j.Write(context.Background(), letter(1_000_000)); err != nil {
		t.Fatalf("%d letters written, %d sent to the queue, %d still unforwarded, last Forward: %v; a new letter is refused: %v",
			written, sent, left, ferr, err)
	}
}

// Group commit with fsync failing now and then (EIO): every Write that
// returned nil is in the journal after a reopen, and the journal is not
// damaged by the cut of the failed commits.
func TestGroupCommitWithFailingFsync(t *testing.T) {
	path := t.TempDir() + "/dead.journal"
	j, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	old := syncFile
	t.Cleanup(func() { syncFile = old })
	var mu sync.Mutex
	calls := 0
	syncFile = func(f *os.File) error {
		mu.Lock()
		calls++
		fail := calls%5 == 0
		mu.Unlock()
		if fail {
			return errors.New("EIO (injected)")
		}
		return old(f)
	}
	var okMu sync.Mutex
	ok, failed := map[uint64]bool{}, 0
	var wg sync.WaitGroup
	for w := range 32 {
		wg.Go(func() {
			for i := range 40 {
				op := w*1000 + i
				err := j.Write(context.Background(), letter(op))
				okMu.Lock()
				if err == nil {
					ok[uint64(op)] = true
				} else {
					failed++
				}
				okMu.Unlock()
			}
		})
	}
	wg.Wait()
	syncFile = old
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	j, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if err := j.Damage(); err != nil {
		t.Fatalf("after failed commits: %v", err)
	}
	got, err := ReadAll(path)
	if err != nil {
		t.Fatal(err)
	}
	for op := range ok {
		if !contains(got, op) {
			t.Fatalf("letter %d was acknowledged and is gone (%d acked, %d failed, %d read)", op, len(ok), failed, len(got))
		}
	}
	t.Logf("%d acknowledged, %d failed, %d read", len(ok), failed, len(got))
}

// Issue 20, item 5: "Any other damage is still kept and reported." Damage
// that appears while the journal is open (a bad sector read back after the
// page cache let it go) is skipped by Forward, but reported by Damage, and
// compaction keeps its bytes on disk.
func TestDamageFoundWhileForwardingIsKeptAndReported(t *testing.T) {
	lowCompaction(t)
	path := t.TempDir() + "/dead.journal"
	j := openWritten(t, path, 100)
	data, _ := os.ReadFile(path)
	at := bytes.Index(data, []byte(`"SMS-2FA-50"`))
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{'s'}, int64(at+1)); err != nil { // the disk returns one bad byte
		t.Fatal(err)
	}
	_ = f.Close()
	sent := forwardAll(t, j, 64)
	for i := 100; i < 200; i++ {
		if err := j.Write(context.Background(), letter(i)); err != nil {
			t.Fatal(err)
		}
	}
	sent = append(sent, forwardAll(t, j, 64)...)
	_, rerr := ReadAll(path)
	forwarded50 := false
	for _, op := range sent {
		forwarded50 = forwarded50 || op == 50
	}
	if !forwarded50 && j.Damage() == nil && rerr == nil {
		t.Fatalf("letter 50 was acknowledged, then damaged on disk: it was not forwarded, Damage() is nil, "+
			"and ReadAll reports nothing (%d letters forwarded; file now %d bytes)", len(sent), fileSize(path))
	}
	var ce *CorruptError
	if forwarded50 || !errors.As(j.Damage(), &ce) || !errors.As(rerr, &ce) {
		t.Fatalf("letter 50 damaged while open: forwarded %v, Damage() = %v, ReadAll after compaction: %v", forwarded50, j.Damage(), rerr)
	}
}

// The compaction scratch file is truncated only once its lock is taken: a
// scratch file another compaction holds is left as it is.
func TestCompactionLeavesALockedScratchFileAlone(t *testing.T) {
	lowCompaction(t)
	path := t.TempDir() + "/dead.journal"
	j := openWritten(t, path, 100)
	other, err := os.OpenFile(path+".compacting", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := lockFile(other); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Write([]byte("another compaction's copy")); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Forward(90, func([]retry.DeadLetter) error { return nil }); !errors.Is(err, ErrLocked) {
		t.Fatalf("Forward compacting while the scratch file is locked: %v, want ErrLocked", err)
	}
	if data, err := os.ReadFile(path + ".compacting"); err != nil || string(data) != "another compaction's copy" {
		t.Fatalf("the locked scratch file was changed: %q, %v", data, err)
	}
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return -1
	}
	return fi.Size()
}

// openWritten opens a journal at path, closed with the test, and writes
// letters 0 to n-1 to it.
func openWritten(t *testing.T, path string, n int) *Journal {
	t.Helper()
	j, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = j.Close() })
	for i := range n {
		if err := j.Write(context.Background(), letter(i)); err != nil {
			t.Fatal(err)
		}
	}
	return j
}

// childLine records a line of outboxChild's: "acked N" or "queued N".
func childLine(t *testing.T, round int, line string, acked, queued map[uint64]bool) {
	t.Helper()
	kind, op, _ := strings.Cut(line, " ")
	n, err := strconv.ParseUint(op, 10, 64)
	switch {
	case err != nil:
		t.Fatalf("round %d: %s", round, line)
	case kind == "acked":
		acked[n] = true
	case kind == "queued":
		queued[n] = true
	}
}

// The mark is overwritten in place, so a crash can leave it half old, half
// new: its checksum then fails and it counts for nothing. Every letter is
// shipped again, none skipped.
func TestATornMarkCountsForNothing(t *testing.T) {
	path := t.TempDir() + "/dead.journal"
	j := openWritten(t, path, 10)
	if n, err := j.Forward(6, func([]retry.DeadLetter) error { return nil }); n != 6 || err != nil {
		t.Fatalf("Forward: %d, %v", n, err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(markPath(path))
	if err != nil || len(data) != markSize {
		t.Fatalf("mark of %d bytes, %v; want %d", len(data), err, markSize)
	}
	at := bytes.Index(data, []byte(`"offset":`))
	at += bytes.IndexByte(data[at:], ',') - 1
	data[at] ^= 1 // the offset's last digit, as if half of an older mark were left
	if err := os.WriteFile(markPath(path), data, 0o600); err != nil {
		t.Fatal(err)
	}
	j = openWritten(t, path, 0)
	if n, err := j.Unforwarded(); n != 10 || err != nil {
		t.Fatalf("after a torn mark: %d letters unforwarded, %v; want all 10 shipped again", n, err)
	}
}

// FuzzMark: the forwarded mark is an on-disk format. Whatever the file
// holds, decodeMark never panics, and a mark it accepts encodes again and
// reads back the same (TestATornMarkCountsForNothing: a torn one is refused).
func FuzzMark(f *testing.F) {
	good, _ := encodeMark(mark{File: 42, Offset: 1234, Last: 1000, CRC: 7})
	f.Add(good)
	f.Add(good[:100])
	f.Add([]byte(`{"file":42,"offset":1234,"last":1000,"crc":7}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, ok := decodeMark(data)
		if !ok {
			return
		}
		again, err := encodeMark(m)
		if err != nil {
			t.Fatalf("accepted %q, but it does not encode: %v", data, err)
		}
		if back, ok := decodeMark(again); !ok || back != m {
			t.Fatalf("accepted %q as %+v, which reads back as %+v", data, m, back)
		}
	})
}
