//go:build unix

package sqlite

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// fileLock is an exclusive advisory lock (flock) on a file, held by an
// open descriptor: closing it — or the process dying — releases it.
type fileLock struct{ f *os.File }

// lockFile takes the lock on path, creating the file, and writes this
// process's id into it so that the error another process gets can say
// who holds it.
func lockFile(path string) (*fileLock, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(path)
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			if pid := strings.TrimSpace(string(holder)); pid != "" {
				return nil, fmt.Errorf("%w (pid %s holds %s)", ErrLocked, pid, path)
			}
			return nil, fmt.Errorf("%w (%s is locked)", ErrLocked, path)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &fileLock{f: f}, nil
}

func (l *fileLock) release() { _ = l.f.Close() }
