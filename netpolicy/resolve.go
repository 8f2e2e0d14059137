package netpolicy

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"time"
)

// LookupWith adapts a *net.Resolver (nil: net.DefaultResolver) to a
// Resolver whose every lookup is bounded by timeout.
func LookupWith(r *net.Resolver, timeout time.Duration) Resolver {
	if r == nil {
		r = net.DefaultResolver
	}
	return func(ctx context.Context, host string) ([]netip.Addr, error) {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return r.LookupNetIP(ctx, "ip", host)
	}
}

// Cache remembers a Resolver's answers (failures included) for ttl, so a
// worker that heartbeats every second with a host name costs one lookup
// per ttl, and a flood of heartbeats naming the same host one lookup in
// all. It holds at most max names (it is emptied when full). now is the
// clock.
func Cache(resolve Resolver, ttl time.Duration, max int, now func() time.Time) Resolver {
	type entry struct {
		addrs   []netip.Addr
		err     error
		expires time.Time
	}
	var mu sync.Mutex
	cache := map[string]entry{}
	return func(ctx context.Context, host string) ([]netip.Addr, error) {
		t := now()
		mu.Lock()
		e, ok := cache[host]
		mu.Unlock()
		if ok && t.Before(e.expires) {
			return e.addrs, e.err
		}
		addrs, err := resolve(ctx, host)
		if ctx.Err() != nil {
			return addrs, err // the caller gave up: not the name's answer
		}
		mu.Lock()
		if len(cache) >= max {
			clear(cache)
		}
		cache[host] = entry{addrs: addrs, err: err, expires: t.Add(ttl)}
		mu.Unlock()
		return addrs, err
	}
}
