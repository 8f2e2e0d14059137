package cluster

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Replicas build their worker registries independently (heartbeats,
// static configuration, discovery sources run by every replica), and
// must reach the same one. With Config.RegistryDigest set, every
// anti-entropy digest carries this replica's registry digest and peers
// compare it with theirs: a peer whose registry differs is counted, and
// one that keeps differing for longer than Config.RegistryDivergence
// (sources poll on their own schedules, so short differences are normal)
// is logged once, until it agrees again.

// DefaultRegistryDivergence bounds how long two replicas' registries may
// differ before it is reported.
const DefaultRegistryDivergence = 30 * time.Second

type registryAgreement struct {
	mismatches atomic.Uint64
	mu         sync.Mutex
	peers      map[string]*registryPeer
}

type registryPeer struct {
	since, last time.Time // differing since (zero: agrees); last digest
	warned      bool
}

// checkRegistry compares a peer's registry digest with ours.
func (n *Node) checkRegistry(d digestMsg, now time.Time) {
	if !d.HasRegistry || n.cfg.RegistryDigest == nil {
		return
	}
	ours := n.cfg.RegistryDigest()
	a := &n.registry
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.peers == nil {
		a.peers = map[string]*registryPeer{}
	}
	p := a.peers[d.Origin]
	if p == nil {
		p = &registryPeer{}
		a.peers[d.Origin] = p
	}
	p.last = now
	if ours == d.Registry {
		if p.warned {
			n.log.Info("replicas agree on the worker registry again", "peer", d.Origin)
		}
		p.since, p.warned = time.Time{}, false
		return
	}
	a.mismatches.Add(1)
	if p.since.IsZero() {
		p.since = now
	}
	bound := n.cfg.RegistryDivergence
	if bound <= 0 {
		bound = DefaultRegistryDivergence
	}
	if !p.warned && now.Sub(p.since) >= bound {
		p.warned = true
		n.log.Warn("a peer's worker registry has differed from this replica's: check that every replica has the same --discover, --static-workers and access (DNS, RBAC)",
			"peer", d.Origin, "for", now.Sub(p.since).Round(time.Second), "ours", ours, "theirs", d.Registry)
	}
}

// RegistryAgreement reports the digests whose registry differed from this
// replica's (a count since Start) and the peers that have differed for
// longer than RegistryDivergence, sorted. Peers not heard from for ten
// times that bound are forgotten.
func (n *Node) RegistryAgreement() (mismatches uint64, diverged []string) {
	a := &n.registry
	a.mu.Lock()
	defer a.mu.Unlock()
	now := time.Now()
	bound := n.cfg.RegistryDivergence
	if bound <= 0 {
		bound = DefaultRegistryDivergence
	}
	for name, p := range a.peers {
		switch {
		case now.Sub(p.last) > 10*bound:
			delete(a.peers, name)
		case !p.since.IsZero() && now.Sub(p.since) >= bound:
			diverged = append(diverged, name)
		}
	}
	slices.Sort(diverged)
	return a.mismatches.Load(), diverged
}
