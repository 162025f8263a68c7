package deadletter

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/retryguard/retryguard/runtime/retry"
)

// clean is a journal of n letters as the current format writes it, with
// the offset where each record's frame starts and ends.
type clean struct {
	data         []byte
	starts, ends []int
}

var cleanJournals sync.Map // of int to clean; each is written once per process

func cleanJournal(t testing.TB, n int) clean {
	if c, ok := cleanJournals.Load(n); ok {
		return c.(clean)
	}
	path := filepath.Join(t.TempDir(), "clean.journal")
	j, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	var c clean
	size := func() int {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return int(fi.Size())
	}
	for i := range n {
		c.starts = append(c.starts, size())
		if err := j.Write(context.Background(), letter(i)); err != nil {
			t.Fatal(err)
		}
		c.ends = append(c.ends, size())
	}
	_ = j.Close()
	if c.data, err = os.ReadFile(path); err != nil {
		t.Fatal(err)
	}
	cleanJournals.Store(n, c)
	return c
}

// FuzzJournal damages a journal of up to 15 records by inserting or
// overwriting garbage at any offset (with no records, the file is the
// garbage alone). Open and ReadAll never panic; ReadAll returns every record
// whose frame the damage did not touch, in order; and a journal that opens
// takes a new record after all of them.
func FuzzJournal(f *testing.F) {
	f.Add(uint8(10), uint32(300), false, []byte{0xff})
	f.Add(uint8(10), uint32(1000), true, []byte("garbage garbage"))
	f.Add(uint8(3), uint32(5), true, []byte{0})
	f.Add(uint8(3), uint32(0), false, legacyFrame(letter(7)))
	f.Add(uint8(0), uint32(0), false, append(legacyFrame(letter(1)), legacyFrame(letter(2))...))
	fsync := syncFile
	syncFile = func(*os.File) error { return nil }
	f.Cleanup(func() { syncFile = fsync })
	scratch := scratchDir(f)
	f.Fuzz(func(t *testing.T, records uint8, at uint32, overwrite bool, garbage []byte) {
		checkDamaged(t, scratch, records, at, overwrite, garbage)
	})
}

// scratchDir is a directory for one input's file at a time: in memory
// (tmpfs) where the system has one, since rewriting a file on a disk-backed
// file system can wait for writeback and starve the fuzzer.
func scratchDir(f *testing.F) string {
	if dir, err := os.MkdirTemp("/dev/shm", "deadletter-fuzz-"); err == nil {
		f.Cleanup(func() { _ = os.RemoveAll(dir) })
		return dir
	}
	return f.TempDir()
}

// checkDamaged is FuzzJournal's check of one input.
func checkDamaged(t testing.TB, scratch string, records uint8, at uint32, overwrite bool, garbage []byte) {
	t.Helper()
	n := int(records % 16)
	var file []byte
	var want []uint64 // the operations the damage did not touch
	if n == 0 {
		file = garbage
	} else {
		c := cleanJournal(t, n)
		p := int(at % uint32(len(c.data)+1))
		from, to := p, p+len(garbage) // the damaged bytes of the clean journal
		if overwrite {
			file = append(append([]byte(nil), c.data[:p]...), garbage...)
			if to < len(c.data) {
				file = append(file, c.data[to:]...)
			}
		} else {
			file = append(append(append([]byte(nil), c.data[:p]...), garbage...), c.data[p:]...)
			to = p
		}
		for i := range n {
			before := c.ends[i] <= from
			after := c.starts[i] >= to
			if len(garbage) == 0 || before || after {
				want = append(want, uint64(i))
			}
		}
	}
	path := filepath.Join(scratch, "dead.journal") // one input at a time per process
	if err := os.WriteFile(path, file, 0o600); err != nil {
		t.Fatal(err)
	}
	got, readErr := ReadAll(path)
	if !subsequence(want, got) {
		t.Fatalf("ReadAll returned %v, missing some of the intact %v (%v)", operations(got), want, readErr)
	}
	j, err := Open(path)
	if err != nil {
		return // refusing a journal is allowed; destroying one is not
	}
	const next = 1 << 20
	if err := j.Write(context.Background(), letter(next)); err != nil {
		t.Fatal(err)
	}
	_ = j.Close()
	again, err := ReadAll(path)
	if len(again) != len(got)+1 || !subsequence(operations(got), again[:len(got)]) || again[len(got)].OperationID != next {
		t.Fatalf("after Open and one append: %v, before %v (%v)", operations(again), operations(got), err)
	}
}

// subsequence reports whether the operations want appear in got, in order.
func subsequence(want []uint64, got []retry.DeadLetter) bool {
	i := 0
	for _, l := range got {
		if i < len(want) && l.OperationID == want[i] && l.Key == letter(int(want[i])).Key {
			i++
		}
	}
	return i == len(want)
}

// FuzzTornZeroTail cuts a journal of up to 15 records anywhere after its
// header and appends up to 64 KiB of zeroes: what a power cut leaves when a
// file's new size reached the disk before its data. The records before the
// cut are read with no error; Open cuts the tail, reports no damage, and
// takes a new record after them.
func FuzzTornZeroTail(f *testing.F) {
	f.Add(uint8(5), uint32(0), uint16(100))
	f.Add(uint8(5), uint32(37), uint16(1))
	f.Add(uint8(1), uint32(15), uint16(4096))
	f.Add(uint8(15), uint32(9999), uint16(0))
	fsync := syncFile
	syncFile = func(*os.File) error { return nil }
	f.Cleanup(func() { syncFile = fsync })
	scratch := scratchDir(f)
	f.Fuzz(func(t *testing.T, records uint8, at uint32, zeroes uint16) {
		n := int(records%15) + 1
		c := cleanJournal(t, n)
		cut := len(fileHeader) + int(at%uint32(len(c.data)-len(fileHeader)+1))
		var want []uint64
		for i := range n {
			if c.ends[i] <= cut {
				want = append(want, uint64(i))
			}
		}
		file := append(append([]byte(nil), c.data[:cut]...), make([]byte, int(zeroes)%(64<<10+1))...)
		path := filepath.Join(scratch, "dead.journal")
		if err := os.WriteFile(path, file, 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := ReadAll(path)
		if fmt.Sprint(operations(got)) != fmt.Sprint(want) || err != nil {
			t.Fatalf("cut at %d of %d, %d zeroes: ReadAll %v, %v; want %v", cut, len(c.data), zeroes, operations(got), err, want)
		}
		j, err := Open(path)
		if err != nil {
			t.Fatalf("cut at %d, %d zeroes: %v", cut, zeroes, err)
		}
		if err := j.Damage(); err != nil {
			t.Fatalf("cut at %d, %d zeroes: reported as damage: %v", cut, zeroes, err)
		}
		const next = 1 << 20
		if err := j.Write(context.Background(), letter(next)); err != nil {
			t.Fatal(err)
		}
		_ = j.Close()
		again, err := ReadAll(path)
		if fmt.Sprint(operations(again)) != fmt.Sprint(append(want, next)) || err != nil {
			t.Fatalf("cut at %d, %d zeroes: after Open and one append %v, %v", cut, zeroes, operations(again), err)
		}
	})
}
