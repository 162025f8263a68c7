package deadletter

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryguard/retryguard/runtime/retry"
)

// Concurrent Writes share fsyncs (group commit), and each still returns
// only once its own record is durable: every fsync here takes 2 ms, and each
// of one writer's records is found within the bytes an fsync had covered
// when its Write returned. On the old journal each Write had an fsync of its
// own: 800 writes, 800 fsyncs.
func TestConcurrentWritesShareFsyncs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dead.journal")
	j, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	var syncs atomic.Int64
	var durable atomic.Int64 // the file's size when the last fsync began
	fsync := syncFile
	syncFile = func(f *os.File) error {
		fi, err := f.Stat()
		if err != nil || !fi.Mode().IsRegular() {
			return fsync(f)
		}
		syncs.Add(1)
		time.Sleep(2 * time.Millisecond)
		err = fsync(f)
		durable.Store(fi.Size())
		return err
	}
	t.Cleanup(func() { syncFile = fsync })
	const writers, each = 16, 50
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				op := w*each + i
				if err := j.Write(context.Background(), letter(op)); err != nil {
					t.Error(err)
					return
				}
				if w != 0 {
					continue
				}
				data, _ := os.ReadFile(path)
				synced, _ := read(bytes.NewReader(data[:durable.Load()]), durable.Load(), path)
				if !contains(synced, uint64(op)) {
					t.Errorf("Write %d returned before an fsync covered its record", op)
					return
				}
			}
		})
	}
	wg.Wait()
	syncFile = fsync
	_ = j.Close()
	got, err := ReadAll(path)
	if len(got) != writers*each || err != nil {
		t.Fatalf("%d of %d records, %v", len(got), writers*each, err)
	}
	if n := syncs.Load(); n > writers*each/4 {
		t.Fatalf("%d fsyncs for %d concurrent writes: not shared", n, writers*each)
	}
	t.Logf("%d fsyncs for %d writes", syncs.Load(), writers*each)
}

// contains reports whether op is among the letters' operations.
func contains(letters []retry.DeadLetter, op uint64) bool {
	for _, l := range letters {
		if l.OperationID == op {
			return true
		}
	}
	return false
}

// BenchmarkGroupCommit writes letters from 1 and from 16 goroutines to a
// journal on the disk that holds the test's temporary directory; each
// Write returns once fsynced. Its letters/s at 16 writers over that at 1
// is the group commit's gain (docs/benchmarks.md).
func BenchmarkGroupCommit(b *testing.B) {
	for _, writers := range []int{1, 16, 128} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			j, err := Open(filepath.Join(b.TempDir(), "dead.journal"))
			if err != nil {
				b.Fatal(err)
			}
			defer j.Close()
			l := letter(1)
			var next atomic.Int64
			next.Store(int64(b.N))
			b.ReportAllocs()
			b.ResetTimer()
			var wg sync.WaitGroup
			for range writers {
				wg.Go(func() {
					for next.Add(-1) >= 0 {
						if err := j.Write(context.Background(), l); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "letters/s")
		})
	}
}
