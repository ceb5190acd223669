//go:build unix

package intentlog

import (
	"errors"
	"os"
	"syscall"
)

// lock takes an exclusive lock on f for as long as it is open (the kernel
// drops it when the process dies), or fails with ErrLocked if another
// open file holds one.
func lock(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var lerr error
	if err := rc.Control(func(fd uintptr) {
		lerr = syscall.Flock(int(fd), syscall.LOCK_EX|syscall.LOCK_NB)
	}); err != nil {
		return err
	}
	if errors.Is(lerr, syscall.EWOULDBLOCK) {
		return ErrLocked
	}
	return lerr
}
