//go:build linux

package bench

import (
	"syscall"
	"time"
)

// fineSleep sleeps d in the kernel (nanosleep: the hrtimer's ~50 µs
// slack). A Go timer wakes an idle runtime through the network poller,
// whose timeout has millisecond resolution, so a pacer sleeping 0.1 ms
// would wake up to 1 ms late and send its requests in bursts. The
// blocked thread gives its P up like any blocking syscall. An
// interrupted sleep just returns early: the caller recomputes what is
// due.
func fineSleep(d time.Duration) bool {
	ts := syscall.NsecToTimespec(int64(d))
	_ = syscall.Nanosleep(&ts, nil)
	return true
}
