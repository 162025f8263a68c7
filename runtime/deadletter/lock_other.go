//go:build !unix

package deadletter

import "os"

// lockFile does nothing where flock(2) does not exist: there, one journal
// file must be opened by one writer by convention only.
func lockFile(*os.File) error { return nil }

// fileID is 0 where there is no inode: the forwarded mark then always
// applies to the file at the journal's path.
func fileID(os.FileInfo) uint64 { return 0 }
