//go:build unix

package deadletter

import (
	"errors"
	"os"
	"syscall"
)

// lockFile takes an exclusive flock(2) on f without waiting. The lock
// belongs to f's open file description, so a second Open of the same file
// conflicts with the first even in one process, and the kernel releases it
// when the descriptor is closed or the process dies (docs/deadletter-journal.md).
func lockFile(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EWOULDBLOCK):
			return ErrLocked
		}
		return err
	}
}

// fileID is the inode of fi: it tells the forwarded mark which file it
// belongs to, since compaction replaces the journal with a new file.
func fileID(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Ino)
	}
	return 0
}
