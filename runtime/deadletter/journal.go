// Package deadletter stores operations that did not complete
// (BUDGET_EXHAUSTED, TERMINAL_EXHAUSTED, UNKNOWN_OUTCOME) for
// reconciliation. The default is a durable append-only journal on local
// disk; runtime/events/kafka offers a topic instead.
package deadletter

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"sync"

	"github.com/retryguard/retryguard/runtime/retry"
)

// Each record is framed as: 4-byte big-endian length, 4-byte CRC-32C of the
// body, then the body (one JSON dead letter). A crash mid-write leaves at
// most a torn last frame, which Open cuts off.
const frameHeader = 8

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// maxRecord bounds one record, so a corrupt length cannot ask for gigabytes.
const maxRecord = 16 << 20

// Journal is an append-only dead-letter file. Write returns once the record
// is fsynced. It is safe for concurrent use.
type Journal struct {
	mu   sync.Mutex
	f    *os.File
	path string
}

var _ retry.DeadLetterSink = (*Journal)(nil)

// Open opens (or creates) the journal at path. A torn last frame from a
// crash is truncated; every complete record before it is kept.
func Open(path string) (*Journal, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	good, err := scan(f, nil)
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	if err := f.Truncate(good); err != nil {
		_ = f.Close()
		return nil, err
	}
	if _, err := f.Seek(good, io.SeekStart); err != nil {
		_ = f.Close()
		return nil, err
	}
	return &Journal{f: f, path: path}, nil
}

// Write appends one dead letter and fsyncs it.
func (j *Journal) Write(_ context.Context, l retry.DeadLetter) error {
	body, err := json.Marshal(l)
	if err != nil {
		return err
	}
	frame := make([]byte, frameHeader+len(body))
	binary.BigEndian.PutUint32(frame[0:4], uint32(len(body)))
	binary.BigEndian.PutUint32(frame[4:8], crc32.Checksum(body, castagnoli))
	copy(frame[frameHeader:], body)
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return errors.New("deadletter: journal closed")
	}
	if _, err := j.f.Write(frame); err != nil {
		return err
	}
	return j.f.Sync()
}

// Close closes the file.
func (j *Journal) Close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return nil
	}
	err := j.f.Close()
	j.f = nil
	return err
}

// ReadAll returns every complete record of the journal at path, in order.
func ReadAll(path string) ([]retry.DeadLetter, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []retry.DeadLetter
	_, err = scan(f, func(l retry.DeadLetter) { out = append(out, l) })
	return out, err
}

// scan reads frames from the start of f, calling each for every complete
// record, and returns the offset after the last complete one.
func scan(f *os.File, each func(retry.DeadLetter)) (int64, error) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return 0, err
	}
	r := bufio.NewReader(f)
	var good int64
	header := make([]byte, frameHeader)
	for {
		if _, err := io.ReadFull(r, header); err != nil {
			return good, nil // end of file, or a torn header
		}
		n := binary.BigEndian.Uint32(header[0:4])
		if n > maxRecord {
			return good, nil
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(r, body); err != nil {
			return good, nil // a torn body
		}
		if crc32.Checksum(body, castagnoli) != binary.BigEndian.Uint32(header[4:8]) {
			return good, nil
		}
		var l retry.DeadLetter
		if err := json.Unmarshal(body, &l); err != nil {
			return good, fmt.Errorf("deadletter: record at %d: %w", good, err)
		}
		if each != nil {
			each(l)
		}
		good += int64(frameHeader) + int64(n)
	}
}
