//go:build !linux

package intentlog

import "os"

// datasync flushes f to the disk (fsync where fdatasync is not offered).
func datasync(f *os.File) error { return f.Sync() }
