package cluster

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// ErrKeyMismatch is wrapped by Membership's error when this replica is
// short of members and gossip could not be decrypted lately: its cluster
// key is not its peers'.
var ErrKeyMismatch = errors.New("cluster key mismatch")

// keyMismatchText is what memberlist's errors say when no key of the
// keyring decrypts a message (memberlist security.go).
const keyMismatchText = "no installed keys could decrypt"

// keyMismatchRecent is how long a decrypt failure counts as the reason a
// replica is short of members.
const keyMismatchRecent = 2 * time.Minute

func isKeyMismatch(msg string) bool { return strings.Contains(strings.ToLower(msg), keyMismatchText) }

func (c *counters) keyMismatch(now time.Time) {
	c.keyMismatches.Add(1)
	c.lastKeyMismatch.Store(now.UnixNano())
}

// joinState is what the last join attempt that resolved its seeds found:
// whether they named any address but this replica's own (a DNS name whose
// other pods are gone names only this one again), and how it ended.
type joinState struct {
	mu        sync.Mutex
	elsewhere bool   // a seed resolved to another address
	err       string // the last attempt's error ("" once one reached a seed)
}

func (j *joinState) note(elsewhere bool, err error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.elsewhere = elsewhere
	j.err = ""
	if err != nil {
		j.err = err.Error()
	}
}

func (j *joinState) get() (bool, string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.elsewhere, j.err
}

// ExpectedMembers is the fewest alive members (this replica included)
// Membership accepts: minMembers when positive; else 2 once a seed named
// an address other than this replica's own (at least one seed must be
// reachable), else 1 (a replica alone by design: no seeds, or seeds that
// name only itself).
func (n *Node) ExpectedMembers(minMembers int) int {
	if minMembers > 0 {
		return minMembers
	}
	if elsewhere, _ := n.joined.get(); elsewhere {
		return 2
	}
	return 1
}

// Membership is nil while the cluster has the members the replica
// expects (ExpectedMembers), else says why not: how many are alive
// against how many are wanted, the last join's error, and, when gossip
// failed to decrypt in the last keyMismatchRecent, that the cluster key
// is not the peers' (ErrKeyMismatch).
func (n *Node) Membership(minMembers int) error {
	return n.membership(minMembers, time.Now())
}

func (n *Node) membership(minMembers int, now time.Time) error {
	alive := 0
	for _, m := range n.Members() {
		if m.Alive {
			alive++
		}
	}
	want := n.ExpectedMembers(minMembers)
	if alive >= want {
		return nil
	}
	msg := fmt.Sprintf("cluster has %d live member(s), want at least %d", alive, want)
	if minMembers <= 0 {
		msg += " (the seeds name other replicas and none is reachable; --cluster-min-members=1 accepts a replica alone)"
	} else {
		msg += " (--cluster-min-members)"
	}
	_, joinErr := n.joined.get()
	if joinErr != "" {
		msg += "; last join: " + joinErr
	}
	if last := n.stats.lastKeyMismatch.Load(); last != 0 && now.Sub(time.Unix(0, last)) < keyMismatchRecent {
		return fmt.Errorf("%w: gossip could not be decrypted (%s) %s ago; check --cluster-key-file against the peers' key: %s",
			ErrKeyMismatch, keyMismatchText, now.Sub(time.Unix(0, last)).Round(time.Second), msg)
	}
	return errors.New(msg)
}
