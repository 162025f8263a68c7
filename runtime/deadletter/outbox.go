package deadletter

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/retryguard/retryguard/runtime/retry"
)

// The journal as an outbox (docs/deadletter-journal.md): a letter is written
// to the local journal first, and a forwarder ships it on (to Kafka, by
// runtime/events/kafka.Forwarder) with Forward. Forward marks what it
// shipped in a small file beside the journal, <path>.forwarded, and compacts
// the journal once enough of it is forwarded, so that the file does not grow
// while the queue takes its letters.
//
// Delivery is at least once. The mark is written after the queue
// acknowledged the letters, so a crash between the two ships them again. It
// names the file it belongs to (its inode) and the last frame it covers
// (where it starts, and its body's CRC); a mark whose file or frame is not
// there, or that cannot be read, counts for nothing, and everything in the
// journal is shipped again. A lost or stale mark therefore costs
// duplicates, never a letter, and consumers deduplicate on Identity, the
// record key.

// CompactBytes is how many bytes of forwarded letters the journal keeps
// before Forward compacts it: it then copies the letters not yet forwarded
// into a new file that replaces the journal.
const CompactBytes = 1 << 20

// compactBytes is CompactBytes; tests lower it.
var compactBytes int64 = CompactBytes

// outbox is a journal's forwarded mark. One Forward at a time holds mu;
// the mark changes under both mu and the journal's mu, so that either
// suffices to read it.
type outbox struct {
	mu sync.Mutex
	mark
}

// mark is a forwarded mark, the content of <path>.forwarded.
type mark struct {
	File   uint64 `json:"file"`   // the fileID of the journal file Offset is in
	Offset int64  `json:"offset"` // the letters before it are forwarded
	// Last is where the last intact frame before Offset starts, and CRC its
	// body's CRC-32C: the frame that must be there for the mark to count.
	Last int64  `json:"last"`
	CRC  uint32 `json:"crc"`
}

func markPath(path string) string { return path + ".forwarded" }

// load reads the forwarded mark of the journal j has just opened, and
// removes what a compaction cut short by a crash left.
func (o *outbox) load(j *Journal) error {
	_ = os.Remove(j.path + ".compacting") // j holds the lock: no compaction runs
	fi, err := j.f.Stat()
	if err != nil {
		return err
	}
	o.mark = mark{File: fileID(fi), Offset: int64(len(fileHeader))}
	data, err := os.ReadFile(markPath(j.path))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var m mark
	if json.Unmarshal(data, &m) != nil || m.File != o.File || m.Offset <= o.Offset || m.Offset > j.end || m.Last >= m.Offset {
		return nil
	}
	if crc, n, ok := frameCRC(j.f, m.Last, j.end); ok && crc == m.CRC && m.Last+n <= m.Offset {
		o.mark = m
	}
	return nil
}

// frameCRC returns the body CRC and the length of the intact frame at off.
func frameCRC(r io.ReaderAt, off, end int64) (uint32, int64, bool) {
	n, st, err := frameAt(r, off, end, nil)
	if err != nil || st != frameIntact {
		return 0, 0, false
	}
	var h [frameHeader]byte
	if _, err := r.ReadAt(h[:], off); err != nil {
		return 0, 0, false
	}
	return binary.BigEndian.Uint32(h[8:12]), n, true
}

// save makes the mark durable. It need not sync the directory: a rename
// lost in a crash leaves the older mark, which only ships letters again.
func (o *outbox) save(path string, m mark) error {
	data, err := json.Marshal(m)
	if err != nil {
		return err
	}
	tmp := markPath(path) + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = syncFile(f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, markPath(path))
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("deadletter: saving the forwarded mark of %s: %w", path, err)
	}
	return nil
}

// Forward passes the oldest letters not yet forwarded, at most max of
// them, to send, and once send returns nil marks them forwarded, durably.
// It returns how many letters send took: 0 when none is waiting. When send
// fails, nothing is marked, and the next Forward passes the same letters
// again. Records in a damaged region are skipped: Damage reports them.
// Forward is safe for concurrent use with Write; one Forward runs at a
// time.
func (j *Journal) Forward(max int, send func([]retry.DeadLetter) error) (int, error) {
	o := &j.outbox
	o.mu.Lock()
	defer o.mu.Unlock()
	f, end, err := j.durable()
	if err != nil {
		return 0, err
	}
	letters, next, last, err := readRange(f, o.Offset, end, max)
	if err != nil || next == o.Offset {
		return 0, err
	}
	if len(letters) > 0 {
		if err := send(letters); err != nil {
			return 0, err
		}
	}
	m := o.mark
	m.Offset = next
	if last >= 0 {
		crc, _, ok := frameCRC(f, last, end)
		if !ok {
			return len(letters), fmt.Errorf("deadletter: the frame at %d of %s changed while it was forwarded", last, j.path)
		}
		m.Last, m.CRC = last, crc
	}
	if err := o.save(j.path, m); err != nil {
		return len(letters), err
	}
	j.mu.Lock()
	o.mark = m
	j.mu.Unlock()
	return len(letters), j.compact()
}

// Unforwarded counts the letters not yet forwarded. It does not wait for
// a Forward under way: the letters that Forward is sending count.
func (j *Journal) Unforwarded() (int, error) {
	for {
		j.mu.Lock()
		f, from, end := j.f, j.outbox.Offset, j.end
		j.mu.Unlock()
		if f == nil {
			return 0, errors.New("deadletter: journal closed")
		}
		letters, _, _, err := readRange(f, from, end, -1)
		j.mu.Lock()
		replaced := j.f != f && j.f != nil
		j.mu.Unlock()
		if err == nil || !replaced {
			return len(letters), err // else compaction closed f meanwhile: read the new file
		}
	}
}

// durable returns the journal's file and the end of its acknowledged
// frames, which never change once written.
func (j *Journal) durable() (*os.File, int64, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return nil, 0, errors.New("deadletter: journal closed")
	}
	return j.f, j.end, nil
}

// readRange reads up to max intact records (all of them when max < 0)
// from the frames between from and end, which end at a frame boundary, and
// returns where it stopped and where the last of them starts (-1: none).
func readRange(r io.ReaderAt, from, end int64, max int) ([]retry.DeadLetter, int64, int64, error) {
	var out []retry.DeadLetter
	each := func(l retry.DeadLetter) { out = append(out, l) }
	off, last := from, int64(-1)
	for off < end && (max < 0 || len(out) < max) {
		n, st, err := frameAt(r, off, end, each)
		if err != nil {
			return nil, from, -1, err
		}
		if st == frameIntact {
			last = off
			off += n
			continue
		}
		next, err := nextMarker(r, off+1, end)
		if err != nil {
			return nil, from, -1, err
		}
		if next < 0 {
			next = end
		}
		off = next
	}
	return out, off, last, nil
}

// compact replaces the journal with a new file that holds only the letters
// not yet forwarded, once at least compactBytes of forwarded letters lead
// it and no more unforwarded bytes follow (so that the copy is never larger
// than what it frees). A damaged journal is not compacted: its damage is
// evidence (see "Damaged regions stay on disk"). Writers wait only while
// the last few letters are copied and the new file is synced and renamed.
// o.mu is held.
func (j *Journal) compact() error {
	o := &j.outbox
	header := int64(len(fileHeader))
	j.mu.Lock()
	f, end, damaged := j.f, j.end, j.damage != nil
	j.mu.Unlock()
	forwarded := o.Offset - header
	if f == nil || damaged || forwarded < compactBytes || end-o.Offset > forwarded {
		return nil
	}
	tmp := j.path + ".compacting"
	out, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	keep := false
	defer func() {
		if !keep {
			_ = out.Close()
			_ = os.Remove(tmp)
		}
	}()
	if err := lockFile(out); err != nil {
		return err
	}
	fi, err := out.Stat()
	if err != nil {
		return err
	}
	// The frames before end are durable and never change: copy them while
	// writers go on appending after them.
	if _, err := out.WriteAt(fileHeader[:], 0); err != nil {
		return err
	}
	if err := copyRange(out, header, f, o.Offset, end); err != nil {
		return err
	}

	j.mu.Lock()
	defer j.mu.Unlock()
	j.paused = true
	defer j.resume()
	for j.committing {
		j.idle.Wait()
	}
	if j.f != f { // closed meanwhile
		return nil
	}
	last := j.end
	if err := copyRange(out, header+end-o.Offset, f, end, last); err != nil {
		return err
	}
	if err := syncFile(out); err != nil {
		return err
	}
	// The mark for the new file goes first: should the rename not happen,
	// it names a file that is not the journal, and counts for nothing.
	fresh := mark{File: fileID(fi), Offset: header}
	if err := o.save(j.path, fresh); err != nil {
		return err
	}
	if err := os.Rename(tmp, j.path); err != nil {
		return err
	}
	// Letters written from now on go to the new file: its name must be
	// durable before any of them is acknowledged.
	if err := syncDir(j.path); err != nil {
		return err
	}
	keep = true
	old := j.f
	j.f, j.end, j.dirty = out, header+last-o.Offset, false
	o.mark = fresh
	_ = old.Close()
	return nil
}

// resume ends compaction's pause: the first writer queued meanwhile takes
// the lead. j.mu is held.
func (j *Journal) resume() {
	j.paused = false
	if !j.committing && len(j.queue) > 0 {
		j.committing = true
		j.queue[0].done <- commitResult{lead: true}
	}
}

// copyRange copies src's bytes from..to to dst at at.
func copyRange(dst *os.File, at int64, src *os.File, from, to int64) error {
	if to <= from {
		return nil
	}
	_, err := io.Copy(io.NewOffsetWriter(dst, at), io.NewSectionReader(src, from, to-from))
	return err
}

// Identity is a dead letter's operation identity: the record key the
// forwarder gives it, on which a queue's consumers deduplicate, and the
// name a reconciliation mark gives it. It is the namespace, the policy and
// the idempotency key, which every attempt of the operation carried (seed
// 000, INV-RTY-05); a letter without a key is named by its operation number
// and time instead.
func Identity(l retry.DeadLetter) string {
	if l.Key != "" {
		return l.Namespace + "/" + l.Policy + "/" + l.Key
	}
	return fmt.Sprintf("%s/%s/#%d@%s", l.Namespace, l.Policy, l.Operation, l.At.UTC().Format(time.RFC3339Nano))
}
