//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package natsbus

import (
	"fmt"
	"os"
)

// lockDir only creates dir on platforms without flock: nothing keeps two
// embedded servers from sharing a store there.
func lockDir(dir string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("embedded NATS store %s: %w", dir, err)
	}
	return nil, nil
}
