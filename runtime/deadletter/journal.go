// Package deadletter stores operations that did not complete
// (BUDGET_EXHAUSTED, TERMINAL_EXHAUSTED, UNKNOWN_OUTCOME) for
// reconciliation, in a durable append-only journal on local disk: the
// outbox that runtime/events/kafka's Forwarder ships to a topic (see
// outbox.go and docs/deadletter-journal.md).
//
// # On-disk format
//
// The journal is written in format 2 (FormatVersion). A file starts with an
// 8-byte header, 0xFF "RGDLJ" 0x00 and the version byte, followed by frames:
//
//	offset  size  field
//	0       4     marker 0xFE 'D' 'L' 0xFF
//	4       4     body length, big-endian, at most MaxRecord
//	8       4     CRC-32C (Castagnoli) of the body
//	12      4     CRC-32C of bytes 0–11 of the frame
//	16      n     body: one retry.DeadLetter as JSON
//
// The marker contains 0xFE and 0xFF, which never occur in UTF-8 and so never
// in a body; the header's own CRC makes a frame's length trustworthy. A
// reader that meets a bad frame therefore searches for the next marker
// whose header checks out, and every intact record after a damaged region
// is still read: ReadAll returns them all, with a *CorruptError naming
// where each damaged region starts and how long it is.
//
// Open cuts only a torn tail: a prefix of one frame at the end of the file,
// recognisable by an intact header whose frame would end past the end of the
// file (or fewer bytes than a header that begin like a marker), or such a
// prefix, possibly empty, followed by zeroes to the end of the file. That is
// what a crash during a write leaves (the zeroes when the file's new size
// reached the disk before its data), and such bytes were never fsynced, so
// never acknowledged. Any other damage stays on disk, as evidence, and new frames
// are appended after it.
//
// # One writer
//
// Open takes an exclusive flock(2) on the file, held until Close or the
// process's death; a second Open of the same journal, in this process or
// another, fails with ErrLocked. ReadAll takes no lock: it reads only, and
// sees every acknowledged record.
//
// Format 1 (before format 2 existed) had no file header and no marker: each
// frame was a 4-byte length, the body's CRC-32C and the body. ReadAll reads
// it, and Open converts it to format 2, atomically (a new file renamed over
// the old), keeping every record. A format 1 journal damaged before its end
// cannot be resynchronised, so Open refuses it with the offset and leaves it
// untouched; ReadAll still returns the records before the damage. A file
// with another format version, or with no recognisable header, is refused
// by Open, never appended to or rewritten.
package deadletter

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/retryguard/retryguard/runtime/retry"
)

// FormatVersion is the on-disk format this package writes.
const FormatVersion = 2

// MaxRecord bounds one record's body, so that a damaged length can never
// ask for gigabytes; Write refuses a larger letter.
const MaxRecord = 16 << 20

var (
	fileHeader  = [8]byte{0xFF, 'R', 'G', 'D', 'L', 'J', 0x00, FormatVersion}
	frameMarker = [4]byte{0xFE, 'D', 'L', 0xFF}
	castagnoli  = crc32.MakeTable(crc32.Castagnoli)
)

const frameHeader = 16

// syncFile is fsync. FuzzJournal, which checks what is read rather than
// what survives a power cut, replaces it so that a busy disk does not slow
// it down.
var syncFile = (*os.File).Sync

// Region is a run of damaged bytes in a journal.
type Region struct {
	Offset, Length int64
}

// CorruptError reports the damaged regions of a journal. The records
// outside them were read.
type CorruptError struct {
	Path    string
	Regions []Region
}

func (e *CorruptError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "deadletter: journal %s is damaged:", e.Path)
	for i, r := range e.Regions {
		if i == 3 {
			fmt.Fprintf(&b, " and %d more regions", len(e.Regions)-i)
			break
		}
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, " %d bytes at offset %d", r.Length, r.Offset)
	}
	b.WriteString("; every intact record outside them was read")
	return b.String()
}

// ErrFull is wrapped by Write's error when the letter would take the
// journal past its cap (WithMaxBytes): the letter was not kept, and the
// journal is unchanged. Letters fit again once Forward compacts it.
var ErrFull = errors.New("deadletter: the journal is at its cap; the letter was not kept")

// Option configures Open.
type Option func(*Journal)

// WithMaxBytes caps the journal's file at n bytes: a Write whose letter
// would take it past n fails with ErrFull instead, so that a journal on a
// volume with a size limit never fills it (compaction's copy is never
// larger than the file it replaces: keep the volume at twice the cap).
// n <= 0: no cap.
func WithMaxBytes(n int64) Option { return func(j *Journal) { j.maxBytes = n } }

// ErrLocked is returned by Open when the journal is already open for
// writing, in this process or another.
var ErrLocked = errors.New("deadletter: the journal is open in another writer (in this process or another); one journal has one writer")

// Journal is an append-only dead-letter file with one writer (Open locks
// it). Write returns once the record is fsynced; concurrent Writes share
// one write and one fsync (group commit). It is safe for concurrent use.
type Journal struct {
	mu   sync.Mutex
	idle sync.Cond // signalled when committing ends
	f    *os.File
	path string
	end  int64 // where the next frame goes: everything before it is durable
	// maxBytes caps end (WithMaxBytes); 0: no cap.
	maxBytes int64
	// dirty says that a failed write may have left bytes after end.
	dirty  bool
	damage *CorruptError
	// unsyncedName says that compaction renamed a new file over the path
	// but could not sync the directory: the next commit syncs it before it
	// acknowledges a letter in that file. Only the leader, or compaction
	// while no leader commits, touches it.
	unsyncedName bool

	// Group commit: the writers queued for the next write and fsync. One of
	// them at a time, the leader, commits the whole queue, then hands the
	// lead to the first writer queued meanwhile.
	queue      []*pendingWrite
	committing bool // a leader is writing (outside mu)
	paused     bool // compaction holds the file: queue, but commit nothing
	closing    bool
	batch      []byte // the leader's buffer

	outbox outbox
}

// pendingWrite is one queued Write's frame and where its outcome goes.
type pendingWrite struct {
	frame []byte
	done  chan commitResult
	full  bool // refused by the cap: not written
}

// commitResult is a queued Write's outcome, or the lead.
type commitResult struct {
	err  error
	lead bool
}

var _ retry.DeadLetterSink = (*Journal)(nil)

// Open opens (or creates) the journal at path. A torn last frame from a
// crash is cut; every other byte is kept, and damage is reported by Damage
// and ReadAll. Open refuses a file it cannot append to safely: another
// format version, no journal header, or a format 1 journal damaged before
// its end.
//
// Open takes the journal's lock first: a second Open of the same file, in
// this process or another, fails with an error that wraps ErrLocked.
func Open(path string, opts ...Option) (*Journal, error) {
	// Twice at most after a conversion or a compaction that replaced the
	// file between its open and its lock.
	for range 3 {
		f, err := openLocked(path)
		if errors.Is(err, errReplaced) {
			continue
		}
		if err != nil {
			return nil, err
		}
		j, err := open(f, path)
		if err != nil {
			_ = f.Close()
			if errors.Is(err, errConverted) {
				continue // open the new file that replaced f
			}
			return nil, err
		}
		j.idle.L = &j.mu
		for _, o := range opts {
			o(j)
		}
		if err := j.outbox.load(j); err != nil {
			_ = f.Close()
			return nil, err
		}
		return j, nil
	}
	return nil, fmt.Errorf("deadletter: %s changed while it was being opened", path)
}

// errReplaced says that the file at the path was replaced between its open
// and its lock: the lock is on a file no longer there.
var errReplaced = errors.New("deadletter: replaced")

// openLocked opens path and locks it, and checks that the file locked is
// still the one at path.
func openLocked(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := lockFile(f); err != nil {
		_ = f.Close()
		if errors.Is(err, ErrLocked) {
			return nil, fmt.Errorf("deadletter: cannot open %s: %w", path, err)
		}
		return nil, fmt.Errorf("deadletter: locking %s: %w", path, err)
	}
	locked, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	if now, err := os.Stat(path); err != nil || !os.SameFile(locked, now) {
		_ = f.Close()
		return nil, errReplaced
	}
	return f, nil
}

// errConverted says that the file was converted to the current format and
// replaced by a new one, which must be opened again.
var errConverted = errors.New("deadletter: converted")

func open(f *os.File, path string) (*Journal, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := fi.Size()
	var head [len(fileHeader)]byte
	n, err := f.ReadAt(head[:], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	switch {
	case bytes.HasPrefix(fileHeader[:], head[:n]) && n < len(fileHeader):
		// New, or a crash while the header was being written.
		if err := f.Truncate(0); err != nil {
			return nil, err
		}
		if _, err := f.WriteAt(fileHeader[:], 0); err != nil {
			return nil, err
		}
		if err := syncFileAndDir(f, path); err != nil {
			return nil, err
		}
		return &Journal{f: f, path: path, end: int64(len(fileHeader))}, nil
	case head == fileHeader:
		s, err := scanFrames(f, int64(len(fileHeader)), size, nil)
		if err != nil {
			return nil, err
		}
		end := size
		if s.torn >= 0 {
			if err := f.Truncate(s.torn); err != nil {
				return nil, err
			}
			if err := syncFile(f); err != nil {
				return nil, err
			}
			end = s.torn
		}
		j := &Journal{f: f, path: path, end: end}
		if len(s.damage) > 0 {
			j.damage = &CorruptError{Path: path, Regions: s.damage}
		}
		return j, nil
	case bytes.Equal(head[:len(head)-1], fileHeader[:len(fileHeader)-1]):
		return nil, fmt.Errorf(
			"deadletter: journal %s is in format version %d; this build writes version %d and reads versions 1 and %d",
			path,
			head[len(head)-1],
			FormatVersion,
			FormatVersion,
		)
	}
	h, err := headless(f, size, nil)
	if err != nil {
		return nil, err
	}
	switch {
	case h.legacy():
		if err := convertLegacy(f, path); err != nil {
			return nil, err
		}
		return nil, errConverted
	case h.format1.frames > 0 && h.format2 == 0:
		return nil, fmt.Errorf(
			"deadletter: format 1 journal %s is damaged at offset %d; refusing to convert or append to it, ReadAll returns the records before the damage",
			path,
			h.format1.stop,
		)
	}
	return nil, fmt.Errorf(
		"deadletter: %s has no journal header at offset 0 (damaged, or not a journal); refusing to append to it, ReadAll recovers its intact records",
		path,
	)
}

// convertLegacy rewrites the format 1 journal in f as format 2 at path,
// atomically: readers see the old file or the new one, never a mixture.
func convertLegacy(f *os.File, path string) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	tmp := path + ".converting"
	out, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer os.Remove(tmp) // a no-op once renamed
	defer out.Close()
	buf := append([]byte(nil), fileHeader[:]...)
	_, err = scanLegacy(f, fi.Size(), func(l retry.DeadLetter) {
		if frame, ferr := encodeFrame(l); ferr == nil {
			buf = append(buf, frame...)
		}
	})
	if err != nil {
		return err
	}
	if _, err := out.Write(buf); err != nil {
		return err
	}
	if err := syncFile(out); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return syncDir(path)
}

func syncFileAndDir(f *os.File, path string) error {
	if err := syncFile(f); err != nil {
		return err
	}
	return syncDir(path)
}

// syncDir makes a file's creation or rename durable.
func syncDir(path string) error {
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return syncFile(d)
}

// Damage reports the damaged regions Open found and those Forward found
// since (at their offsets in the current file, which compaction moves), or
// nil. The error it returned is never changed afterwards.
func (j *Journal) Damage() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.damage == nil {
		return nil
	}
	return j.damage
}

func encodeFrame(l retry.DeadLetter) ([]byte, error) {
	body, err := json.Marshal(l)
	if err != nil {
		return nil, err
	}
	if len(body) > MaxRecord {
		return nil, fmt.Errorf("deadletter: a letter of %d bytes is over the %d-byte limit", len(body), MaxRecord)
	}
	frame := make([]byte, frameHeader+len(body))
	copy(frame[0:4], frameMarker[:])
	binary.BigEndian.PutUint32(frame[4:8], uint32(len(body)))
	binary.BigEndian.PutUint32(frame[8:12], crc32.Checksum(body, castagnoli))
	binary.BigEndian.PutUint32(frame[12:16], crc32.Checksum(frame[0:12], castagnoli))
	copy(frame[frameHeader:], body)
	return frame, nil
}

// Write appends one dead letter and fsyncs it. A local fsync is short and
// bounded, and a letter dropped because its operation's deadline has passed
// would be lost, so Write completes whatever the state of ctx.
//
// Concurrent Writes are committed together: one write and one fsync for
// every letter queued while the previous fsync ran, and each Write returns
// once its own record is durable.
//
// When a write or fsync fails (ENOSPC, EFBIG, EIO), the partial frames are
// cut before Write returns, and every Write of that commit gets the error;
// if even the cut fails, every later commit first retries the cut and
// refuses to append until it succeeds, so a half-written frame never sits in
// front of acknowledged ones.
//
// A journal opened WithMaxBytes refuses a letter that would take its file
// past the cap with an error wrapping ErrFull, writing nothing of it; the
// letters of the same commit that fit are kept.
func (j *Journal) Write(_ context.Context, l retry.DeadLetter) error {
	frame, err := encodeFrame(l)
	if err != nil {
		return err
	}
	w := &pendingWrite{frame: frame, done: make(chan commitResult, 1)}
	j.mu.Lock()
	if j.f == nil || j.closing {
		j.mu.Unlock()
		return errors.New("deadletter: journal closed")
	}
	j.queue = append(j.queue, w)
	if j.committing || j.paused {
		j.mu.Unlock()
		r := <-w.done
		if !r.lead {
			return r.err
		}
		j.mu.Lock() // the lead: commit the queue, w's frame with it
	}
	j.committing = true
	batch := j.queue
	j.queue = nil
	f, end, dirty := j.f, j.end, j.dirty
	j.mu.Unlock()

	end, dirty, err = j.commit(f, end, dirty, batch)

	j.mu.Lock()
	j.end, j.dirty = end, dirty
	j.handOff()
	j.mu.Unlock()
	for _, other := range batch {
		if other != w {
			other.done <- commitResult{err: j.outcome(other, err)}
		}
	}
	return j.outcome(w, err)
}

// outcome is a committed Write's error: ErrFull when the cap refused its
// letter, else the commit's.
func (j *Journal) outcome(w *pendingWrite, err error) error {
	if w.full {
		return fmt.Errorf("%w (%s, %d bytes)", ErrFull, j.path, j.maxBytes)
	}
	return err
}

// handOff ends a commit: it passes the lead to the first writer queued
// meanwhile, or, when none is (or compaction waits for the file), marks the
// journal idle. j.mu is held.
func (j *Journal) handOff() {
	if len(j.queue) > 0 && !j.paused {
		j.queue[0].done <- commitResult{lead: true}
		return
	}
	j.committing = false
	j.idle.Broadcast()
}

// commit writes the frames of batch at end with one write and one fsync,
// and returns the new end. Only the leader calls it, without j.mu: nothing
// else writes to the file or moves end meanwhile.
func (j *Journal) commit(f *os.File, end int64, dirty bool, batch []*pendingWrite) (int64, bool, error) {
	if j.unsyncedName {
		if err := syncDir(j.path); err != nil {
			return end, dirty, fmt.Errorf("deadletter: refusing to append until the compacted journal's name is durable: %w", err)
		}
		j.unsyncedName = false
	}
	if dirty {
		if err := rollback(f, end); err != nil {
			return end, true, fmt.Errorf("deadletter: refusing to append until a failed write is cut from the journal: %w", err)
		}
	}
	buf := j.batch[:0]
	for _, w := range batch {
		if j.maxBytes > 0 && end+int64(len(buf)+len(w.frame)) > j.maxBytes {
			w.full = true
			continue
		}
		buf = append(buf, w.frame...)
	}
	if cap(buf) <= 1<<20 {
		j.batch = buf // keep a buffer of ordinary size for the next commit
	}
	if len(buf) == 0 {
		return end, false, nil // every letter refused by the cap: nothing to write
	}
	_, err := f.WriteAt(buf, end)
	if err == nil {
		err = syncFile(f)
	}
	if err != nil {
		if rerr := rollback(f, end); rerr != nil {
			return end, true, errors.Join(err, fmt.Errorf("deadletter: cutting the failed write: %w", rerr))
		}
		return end, false, err
	}
	return end + int64(len(buf)), false, nil
}

// rollback cuts everything after the last acknowledged frame.
func rollback(f *os.File, end int64) error {
	if err := f.Truncate(end); err != nil {
		return err
	}
	return syncFile(f)
}

// Close waits for the Writes already queued to be committed, refuses any
// later one, closes the file and releases its lock.
func (j *Journal) Close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.closing = true
	for j.committing || len(j.queue) > 0 {
		j.idle.Wait()
	}
	if j.f == nil {
		return nil
	}
	err := j.f.Close()
	j.f = nil
	return err
}

// ReadAll returns every intact record of the journal at path, in order. When
// the journal is damaged, it still returns every intact record, with a
// *CorruptError (or, for a format 1 journal, an error naming the offset
// where reading had to stop).
func ReadAll(path string) ([]retry.DeadLetter, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	return read(f, fi.Size(), path)
}

func read(r io.ReaderAt, size int64, path string) ([]retry.DeadLetter, error) {
	var out []retry.DeadLetter
	each := func(l retry.DeadLetter) { out = append(out, l) }
	var head [len(fileHeader)]byte
	n, err := r.ReadAt(head[:], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	if n < len(head) && bytes.HasPrefix(fileHeader[:], head[:n]) {
		return nil, nil // empty, or a crash while the header was being written
	}
	if head == fileHeader {
		s, err := scanFrames(r, int64(len(fileHeader)), size, each)
		if err != nil {
			return out, err
		}
		if len(s.damage) > 0 {
			return out, &CorruptError{Path: path, Regions: s.damage}
		}
		return out, nil
	}
	h, err := headless(r, size, each)
	if err != nil || h.legacy() {
		return out, err
	}
	regions := h.rest.damage
	if h.rest.torn >= 0 {
		regions = append(regions, Region{Offset: h.rest.torn, Length: size - h.rest.torn})
	}
	missing := fmt.Errorf("deadletter: %s has no journal header at offset 0 (damaged, or not a journal)", path)
	if h.format1.frames > 0 {
		missing = fmt.Errorf("deadletter: format 1 journal %s is damaged at offset %d; the records before it were read", path, h.format1.stop)
	}
	if len(regions) == 0 {
		return out, missing
	}
	return out, errors.Join(missing, &CorruptError{Path: path, Regions: regions})
}

// headlessScan is what headless found in a file without a format 2 header.
type headlessScan struct {
	format1 legacyScan
	rest    frames // format 2 frames after the format 1 ones
	format2 int    // intact format 2 frames among them
	size    int64
}

// legacy reports whether the file is an intact format 1 journal, perhaps
// with a torn tail.
func (h headlessScan) legacy() bool {
	return h.format2 == 0 && (h.format1.stop == h.size || h.format1.tornAtEnd)
}

// headless reads a file without a format 2 header: the format 1 frames it
// starts with, then any format 2 frames after them (a format 2 journal whose
// header was damaged).
func headless(r io.ReaderAt, size int64, each func(retry.DeadLetter)) (headlessScan, error) {
	h := headlessScan{size: size}
	var err error
	if h.format1, err = scanLegacy(r, size, each); err != nil || h.format1.stop == size {
		return h, err
	}
	h.rest, err = scanFrames(r, h.format1.stop, size, func(l retry.DeadLetter) {
		h.format2++
		if each != nil {
			each(l)
		}
	})
	return h, err
}

// frames is what scanFrames found.
type frames struct {
	damage []Region
	torn   int64 // where a torn last frame starts, or -1
}

// scanFrames reads format 2 frames from start to size, calling each for
// every intact record, and resynchronises on the next marker after damage.
func scanFrames(r io.ReaderAt, start, size int64, each func(retry.DeadLetter)) (frames, error) {
	out := frames{torn: -1}
	off, bad := start, int64(-1)
	tornAt := int64(-1)
	for off < size {
		n, st, err := frameAt(r, off, size, each)
		if err != nil {
			return out, err
		}
		if st == frameIntact {
			if bad >= 0 {
				out.damage = append(out.damage, Region{Offset: bad, Length: off - bad})
				bad, tornAt = -1, -1
			}
			off += n
			continue
		}
		if bad < 0 {
			bad = off
			if st == frameTorn {
				tornAt = off
			}
		}
		next, err := nextMarker(r, off+1, size)
		if err != nil {
			return out, err
		}
		if next < 0 {
			break
		}
		off = next
	}
	switch {
	case bad < 0:
	case tornAt == bad:
		// The frame that starts the damage runs past the end of the file,
		// and no intact frame follows: a write cut short.
		out.torn = bad
	case zeroTail(r, bad, size):
		// The file's new size reached the disk before its data, which was
		// never fsynced: at most a prefix of a frame, then zeroes.
		out.torn = bad
	default:
		out.damage = append(out.damage, Region{Offset: bad, Length: size - bad})
	}
	return out, nil
}

// zeroTail reports whether the bytes from start to size are zeroes after
// at most a prefix of one frame cut short: what a crash leaves when a
// file's new size reached the disk before all of its data. A frame's own
// bytes cannot end in a zero (a JSON body ends with '}' and holds no NUL),
// so the zeroes are the data that never arrived, and the frame before them
// is torn.
func zeroTail(r io.ReaderAt, start, size int64) bool {
	buf := make([]byte, min(64<<10, size-start))
	z := size // where the trailing zeroes start
scan:
	for z > start {
		n := min(int64(len(buf)), z-start)
		if _, err := r.ReadAt(buf[:n], z-n); err != nil && !errors.Is(err, io.EOF) {
			return false
		}
		for i := n - 1; i >= 0; i-- {
			if buf[i] != 0 {
				z -= n - 1 - i
				break scan
			}
		}
		z -= n
	}
	if z == size {
		return false // no zeroes: not this kind of tail
	}
	_, st, err := frameAt(r, start, z, nil)
	return err == nil && st == frameTorn
}

type frameState int

const (
	frameBad frameState = iota
	frameTorn
	frameIntact
)

// frameAt checks the frame at off: intact (of length n, its record passed
// to each), torn (a prefix of a frame cut by the end of the file), or bad.
func frameAt(r io.ReaderAt, off, size int64, each func(retry.DeadLetter)) (int64, frameState, error) {
	var h [frameHeader]byte
	if size-off < frameHeader {
		n, err := r.ReadAt(h[:size-off], off)
		if err != nil && !errors.Is(err, io.EOF) {
			return 0, frameBad, err
		}
		if bytes.HasPrefix(h[:n], frameMarker[:min(n, len(frameMarker))]) {
			return 0, frameTorn, nil
		}
		return 0, frameBad, nil
	}
	if _, err := r.ReadAt(h[:], off); err != nil {
		return 0, frameBad, err
	}
	if [4]byte(h[0:4]) != frameMarker || crc32.Checksum(h[0:12], castagnoli) != binary.BigEndian.Uint32(h[12:16]) {
		return 0, frameBad, nil
	}
	length := int64(binary.BigEndian.Uint32(h[4:8]))
	if length > MaxRecord {
		return 0, frameBad, nil
	}
	if off+frameHeader+length > size {
		return 0, frameTorn, nil
	}
	body := make([]byte, length)
	if _, err := r.ReadAt(body, off+frameHeader); err != nil {
		return 0, frameBad, err
	}
	if crc32.Checksum(body, castagnoli) != binary.BigEndian.Uint32(h[8:12]) {
		return 0, frameBad, nil
	}
	var l retry.DeadLetter
	if err := json.Unmarshal(body, &l); err != nil {
		return 0, frameBad, nil // a checksum cannot vouch for what wrote it
	}
	if each != nil {
		each(l)
	}
	return frameHeader + length, frameIntact, nil
}

// nextMarker returns the offset of the first frame marker at or after from,
// or -1.
func nextMarker(r io.ReaderAt, from, size int64) (int64, error) {
	const chunk = 64 << 10
	buf := make([]byte, chunk+len(frameMarker)-1)
	for off := from; off < size; off += chunk {
		n, err := r.ReadAt(buf[:min(int64(len(buf)), size-off)], off)
		if err != nil && !errors.Is(err, io.EOF) {
			return -1, err
		}
		if i := bytes.Index(buf[:n], frameMarker[:]); i >= 0 {
			return off + int64(i), nil
		}
	}
	return -1, nil
}

// legacyScan is what scanLegacy found.
type legacyScan struct {
	frames    int   // intact format 1 frames read
	stop      int64 // offset after the last of them
	tornAtEnd bool  // the rest of the file is a prefix of one frame
}

// scanLegacy reads format 1 frames from offset 0 until the first that is
// not intact.
func scanLegacy(r io.ReaderAt, size int64, each func(retry.DeadLetter)) (legacyScan, error) {
	const legacyHeader = 8
	var s legacyScan
	var h [legacyHeader]byte
	for s.stop < size {
		if size-s.stop < legacyHeader {
			// Torn only if what is there can begin a frame's length.
			n, err := r.ReadAt(h[:size-s.stop], s.stop)
			if err != nil && !errors.Is(err, io.EOF) {
				return s, err
			}
			clear(h[n:])
			s.tornAtEnd = binary.BigEndian.Uint32(h[0:4]) <= MaxRecord
			return s, nil
		}
		if _, err := r.ReadAt(h[:], s.stop); err != nil {
			return s, err
		}
		length := int64(binary.BigEndian.Uint32(h[0:4]))
		if length > MaxRecord {
			return s, nil
		}
		if s.stop+legacyHeader+length > size {
			s.tornAtEnd = true
			return s, nil
		}
		body := make([]byte, length)
		if _, err := r.ReadAt(body, s.stop+legacyHeader); err != nil {
			return s, err
		}
		var l retry.DeadLetter
		if crc32.Checksum(body, castagnoli) != binary.BigEndian.Uint32(h[4:8]) || json.Unmarshal(body, &l) != nil {
			return s, nil
		}
		if each != nil {
			each(l)
		}
		s.frames++
		s.stop += legacyHeader + length
	}
	return s, nil
}
