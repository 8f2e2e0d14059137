//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package natsbus

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockDir takes an exclusive advisory lock on dir/lockFile (created if
// absent), so two embedded servers never share one JetStream store: the
// store does not lock itself, and two writers corrupt it. The kernel drops
// the lock when the process dies, so a crash leaves nothing to clean up.
func lockDir(dir string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("embedded NATS store %s: %w", dir, err)
	}
	f, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("embedded NATS store %s: %w", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close() // the lock error is what matters
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s", ErrStoreDirInUse, dir)
		}
		return nil, fmt.Errorf("lock embedded NATS store %s: %w", dir, err)
	}
	return f, nil
}
