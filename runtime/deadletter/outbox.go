package deadletter

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"slices"
	"strconv"
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
	if errors.Is(err, os.ErrNotExist) || (err == nil && len(data) != markSize) {
		// Make the mark's room while the disk has some, so that saving it
		// never needs new space; should that fail, save tries again.
		_ = o.save(j.path, o.mark)
		return nil
	}
	if err != nil {
		return err
	}
	m, ok := decodeMark(data)
	if !ok || m.File != o.File || m.Offset <= o.Offset || m.Offset > j.end || m.Last >= m.Offset {
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

// markSize is the fixed size of <path>.forwarded. The mark is overwritten
// in place, so that saving it needs no new space on a full disk (the file
// is created at Open, while there is room); a crash in the middle of the
// overwrite leaves a mark whose checksum fails, which counts for nothing.
const markSize = 512

// encodeMark is m as markSize bytes: the CRC-32C of its JSON in hex, the
// JSON, and spaces.
func encodeMark(m mark) ([]byte, error) {
	data, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	buf := fmt.Appendf(make([]byte, 0, markSize), "%08x %s", crc32.Checksum(data, castagnoli), data)
	if len(buf) >= markSize {
		return nil, fmt.Errorf("deadletter: a forwarded mark of %d bytes", len(buf))
	}
	for len(buf) < markSize-1 {
		buf = append(buf, ' ')
	}
	return append(buf, '\n'), nil
}

// decodeMark reads what encodeMark wrote; ok is false for anything else.
func decodeMark(buf []byte) (mark, bool) {
	var m mark
	sum, data, found := bytes.Cut(bytes.TrimRight(buf, " \n"), []byte(" "))
	want, err := strconv.ParseUint(string(sum), 16, 32)
	if !found || len(sum) != 8 || err != nil || crc32.Checksum(data, castagnoli) != uint32(want) || json.Unmarshal(data, &m) != nil {
		return mark{}, false
	}
	return m, true
}

// save makes the mark durable, overwriting the mark file in place. It need
// not sync the directory: a mark file lost in a crash only ships letters
// again.
func (o *outbox) save(path string, m mark) error {
	buf, err := encodeMark(m)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(markPath(path), os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("deadletter: saving the forwarded mark of %s: %w", path, err)
	}
	_, err = f.WriteAt(buf, 0)
	if err == nil {
		err = f.Truncate(markSize) // a longer file of an older build
	}
	if err == nil {
		err = syncFile(f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("deadletter: saving the forwarded mark of %s: %w", path, err)
	}
	return nil
}

// Forward passes the oldest letters not yet forwarded, at most max of
// them, to send, and once send returns nil marks them forwarded, durably.
// It returns how many letters send took: 0 when none is waiting. When send
// fails, nothing is marked, and the next Forward passes the same letters
// again. Records in a damaged region are skipped and the region is kept:
// Damage reports it, whether Open found it or Forward. When the letters
// were sent and marked but the journal could not be compacted, the error
// wraps ErrCompaction, and the next Forward tries again. Forward is safe for concurrent use with Write; one Forward runs at a
// time.
func (j *Journal) Forward(max int, send func([]retry.DeadLetter) error) (int, error) {
	o := &j.outbox
	o.mu.Lock()
	defer o.mu.Unlock()
	f, end, err := j.durable()
	if err != nil {
		return 0, err
	}
	letters, next, last, damage, err := readRange(f, o.Offset, end, max)
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
	j.noteDamage(damage)
	j.mu.Unlock()
	if err := j.compact(); err != nil {
		return len(letters), fmt.Errorf("%w: %w", ErrCompaction, err)
	}
	return len(letters), nil
}

// ErrCompaction is wrapped by Forward's error when the letters were sent
// and marked forwarded but the journal could not be compacted: the batch
// succeeded, and the next Forward tries to compact again.
var ErrCompaction = errors.New("deadletter: the letters were forwarded, but the journal was not compacted")

// noteDamage adds the damaged regions that Forward found (bytes that went
// bad while the journal was open) to those Damage reports. The error Damage
// returned before is never changed. j.mu is held.
func (j *Journal) noteDamage(found []Region) {
	var regions []Region
	if j.damage != nil {
		regions = slices.Clone(j.damage.Regions)
	}
	added := false
	for _, r := range found {
		if !slices.ContainsFunc(regions, func(k Region) bool { return k.Offset == r.Offset }) {
			regions, added = append(regions, r), true
		}
	}
	if added {
		slices.SortFunc(regions, func(a, b Region) int { return cmp.Compare(a.Offset, b.Offset) })
		j.damage = &CorruptError{Path: j.path, Regions: regions}
	}
}

// Unforwarded counts the letters not yet forwarded, holding one of them in
// memory at a time. It does not wait for a Forward under way: the letters
// that Forward is sending count.
func (j *Journal) Unforwarded() (int, error) {
	for {
		j.mu.Lock()
		f, from, end := j.f, j.outbox.Offset, j.end
		j.mu.Unlock()
		if f == nil {
			return 0, errors.New("deadletter: journal closed")
		}
		n := 0
		_, _, _, err := scanRange(f, from, end, func(retry.DeadLetter) bool { n++; return true })
		j.mu.Lock()
		replaced := (j.f != f || j.outbox.Offset != from) && j.f != nil
		j.mu.Unlock()
		if err == nil || !replaced {
			return n, err // else compaction closed or cut f meanwhile: read again
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
// returns where it stopped, where the last of them starts (-1: none) and
// the damaged regions it skipped.
func readRange(r io.ReaderAt, from, end int64, max int) ([]retry.DeadLetter, int64, int64, []Region, error) {
	if max == 0 {
		return nil, from, -1, nil, nil
	}
	var out []retry.DeadLetter
	next, last, damage, err := scanRange(r, from, end, func(l retry.DeadLetter) bool {
		out = append(out, l)
		return max < 0 || len(out) < max
	})
	if err != nil {
		return nil, from, -1, nil, err
	}
	return out, next, last, damage, nil
}

// scanRange passes the intact records of the frames between from and end,
// which end at a frame boundary, to each, one at a time, until each returns
// false; it returns where it stopped, where the last record passed starts
// (-1: none) and the damaged regions it skipped.
func scanRange(r io.ReaderAt, from, end int64, each func(retry.DeadLetter) bool) (int64, int64, []Region, error) {
	var damage []Region
	more := true
	visit := func(l retry.DeadLetter) { more = each(l) }
	off, last, bad := from, int64(-1), int64(-1)
	for off < end && more {
		n, st, err := frameAt(r, off, end, visit)
		if err != nil {
			return from, -1, nil, err
		}
		if st == frameIntact {
			if bad >= 0 {
				damage, bad = append(damage, Region{Offset: bad, Length: off - bad}), -1
			}
			last = off
			off += n
			continue
		}
		if bad < 0 {
			bad = off
		}
		next, err := nextMarker(r, off+1, end)
		if err != nil {
			return from, -1, nil, err
		}
		if next < 0 {
			next = end
		}
		off = next
	}
	if bad >= 0 {
		damage = append(damage, Region{Offset: bad, Length: off - bad})
	}
	return off, last, damage, nil
}

// Scan passes the journal's letters to each, oldest first, forwarded or
// not, until each returns false, holding one of them in memory at a time
// whatever the journal's size; it skips damaged regions (Damage reports
// them). It reads what was acknowledged when it started. A compaction that
// replaces the file while Scan reads it ends the scan with an error: the
// letters passed so far were read, and a new Scan reads the new file.
func (j *Journal) Scan(each func(retry.DeadLetter) bool) error {
	f, end, err := j.durable()
	if err != nil {
		return err
	}
	if _, _, _, err := scanRange(f, int64(len(fileHeader)), end, each); err != nil {
		return fmt.Errorf("deadletter: reading %s (compacted meanwhile?): %w", j.path, err)
	}
	return nil
}

// compact frees the forwarded letters once at least compactBytes of them
// lead the journal and no more unforwarded bytes follow (so that a copy is
// never larger than what it frees). o.mu is held.
//
// When every letter is forwarded and nothing is damaged, the file is cut
// back to its header in place: that needs no new space, so a full disk
// recovers once the queue has taken its letters. Otherwise compact copies
// the damaged regions before the mark (evidence, kept and still reported:
// see "Damaged regions stay on disk" in docs/deadletter-journal.md) and the
// letters not yet forwarded into a new file that replaces the journal.
// Writers wait only while the last few letters are copied and the new file
// is synced and renamed.
func (j *Journal) compact() error {
	o := &j.outbox
	header := int64(len(fileHeader))
	j.mu.Lock()
	f, end := j.f, j.end
	var kept []Region // the damage before the mark, copied to the new file
	var keptBytes int64
	if j.damage != nil {
		for _, r := range j.damage.Regions {
			if r.Offset < o.Offset {
				r.Length = min(r.Length, o.Offset-r.Offset)
				kept, keptBytes = append(kept, r), keptBytes+r.Length
			}
		}
	}
	j.mu.Unlock()
	forwarded := o.Offset - header - keptBytes
	if f == nil || forwarded < compactBytes || end-o.Offset > forwarded {
		return nil
	}
	if len(kept) == 0 && end == o.Offset {
		return j.cutForwarded(f)
	}
	tmp := j.path + ".compacting"
	// Not truncated before it is locked: a compaction that holds it still
	// owns it.
	out, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	if err := lockFile(out); err != nil {
		_ = out.Close()
		return err
	}
	keep := false
	defer func() {
		if !keep {
			_ = out.Close()
			_ = os.Remove(tmp)
		}
	}()
	if err := out.Truncate(0); err != nil {
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
	at := header
	for _, r := range kept {
		if err := copyRange(out, at, f, r.Offset, r.Offset+r.Length); err != nil {
			return err
		}
		at += r.Length
	}
	if err := copyRange(out, at, f, o.Offset, end); err != nil {
		return err
	}

	j.mu.Lock()
	defer j.mu.Unlock()
	j.pause()
	defer j.resume()
	if j.f != f { // closed meanwhile
		return nil
	}
	last := j.end
	if err := copyRange(out, at+end-o.Offset, f, end, last); err != nil {
		return err
	}
	if err := syncFile(out); err != nil {
		return err
	}
	// The mark for the new file goes first: should the rename not happen,
	// it names a file that is not the journal, and counts for nothing.
	fresh := mark{File: fileID(fi), Offset: at}
	if err := o.save(j.path, fresh); err != nil {
		return err
	}
	if err := os.Rename(tmp, j.path); err != nil {
		return err
	}
	// From here on the path is the new file: the journal goes on in it,
	// whose lock it holds, whatever follows.
	keep = true
	old := j.f
	j.f, j.end, j.dirty = out, at+last-o.Offset, false
	j.damage = relocate(j.damage, kept, o.Offset, at)
	o.mark = fresh
	_ = old.Close()
	// Letters written from now on go to the new file: its name must be
	// durable before any of them is acknowledged, so should this sync fail,
	// the next commit syncs the directory first.
	if err := syncDir(j.path); err != nil {
		j.unsyncedName = true
		return err
	}
	return nil
}

// cutForwarded cuts a journal whose every letter is forwarded back to its
// header, in place. The mark goes first: should the cut not happen, the
// letters are shipped again, never skipped. o.mu is held.
func (j *Journal) cutForwarded(f *os.File) error {
	o := &j.outbox
	header := int64(len(fileHeader))
	j.mu.Lock()
	defer j.mu.Unlock()
	j.pause()
	defer j.resume()
	if j.f != f || j.end != o.Offset || j.dirty || j.damage != nil {
		return nil // closed, written or damaged meanwhile: the next Forward sees
	}
	fresh := mark{File: o.File, Offset: header}
	if err := o.save(j.path, fresh); err != nil {
		return err
	}
	o.mark = fresh
	// Should the cut fail, the next commit cuts first (dirty): the bytes
	// left are forwarded letters.
	j.end, j.dirty = header, true
	if err := rollback(f, header); err != nil {
		return err
	}
	j.dirty = false
	return nil
}

// relocate is the damage of a compacted journal: the regions kept before
// the mark now lie one after another from at, and those after the mark
// moved with the letters, from mark to at.
func relocate(damage *CorruptError, kept []Region, mark, at int64) *CorruptError {
	if damage == nil {
		return nil
	}
	out := &CorruptError{Path: damage.Path}
	next := int64(len(fileHeader))
	for _, r := range kept {
		out.Regions = append(out.Regions, Region{Offset: next, Length: r.Length})
		next += r.Length
	}
	for _, r := range damage.Regions {
		if r.Offset >= mark {
			out.Regions = append(out.Regions, Region{Offset: r.Offset - mark + at, Length: r.Length})
		}
	}
	return out
}

// pause makes the writers queue and waits for a commit under way to end,
// so that compaction holds the file. j.mu is held.
func (j *Journal) pause() {
	j.paused = true
	for j.committing {
		j.idle.Wait()
	}
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
// forwarder gives it. One operation can end in more than one letter, so a
// queue's consumers deduplicate, and a reconciliation names a letter, by
// Identity with the letter's operation number and time. It is the namespace, the policy and
// the idempotency key, which every attempt of the operation carried (seed
// 000, INV-RTY-05); a letter without a key is named by its operation number
// and time instead.
func Identity(l retry.DeadLetter) string {
	if l.Key != "" {
		return l.Namespace + "/" + l.Policy + "/" + l.Key
	}
	return fmt.Sprintf("%s/%s/#%d@%s", l.Namespace, l.Policy, l.OperationID, l.At.UTC().Format(time.RFC3339Nano))
}
