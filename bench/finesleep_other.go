//go:build !linux

package bench

import "time"

// fineSleep is not available: the pacer uses a Go timer.
func fineSleep(time.Duration) bool { return false }
