package natsbus

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/kvrouter/kvrouter/internal/loglimit"
	"github.com/kvrouter/kvrouter/internal/redial"
)

// Redial spaces reconnects: after every pass over the server list that
// failed, Base doubling (with equal jitter) up to Max. Short, because every
// second without the bus is a second of stale KV state; never zero, so a
// server that accepts and drops connections is not dialled in a loop.
var Redial = redial.Policy{Base: 250 * time.Millisecond, Max: 5 * time.Second, StableAfter: 10 * time.Second}

// reconnectDelay is the client's wait after its n-th failed pass over the
// servers since the connection was lost.
func reconnectDelay(n int) time.Duration { return Redial.Delay(n, rand.Float64()) }

// ObserveReconnects is a Connect option that reports reconnects: a lost
// connection (connection_lost) and each failed pass over the servers
// (dial_failed) to onReconnect, and the wait the client is in to waits.
// It wraps the handlers set before it, so it goes after them.
func ObserveReconnects(onReconnect func(reason string), waits *redial.Waits) nats.Option {
	return func(o *nats.Options) error {
		key := new(int) // this connection's handle in waits
		delay, disconnected, reconnected, closed := o.CustomReconnectDelayCB, o.DisconnectedErrCB, o.ReconnectedCB, o.ClosedCB
		o.CustomReconnectDelayCB = func(n int) time.Duration {
			d := reconnectDelay(n)
			if delay != nil {
				d = delay(n)
			}
			onReconnect("dial_failed")
			waits.Report(key, d)
			return d
		}
		o.DisconnectedErrCB = func(nc *nats.Conn, err error) {
			if err != nil {
				onReconnect("connection_lost")
			}
			if disconnected != nil {
				disconnected(nc, err)
			}
		}
		o.ReconnectedCB = func(nc *nats.Conn) {
			waits.Report(key, 0)
			if reconnected != nil {
				reconnected(nc)
			}
		}
		o.ClosedCB = func(nc *nats.Conn) {
			waits.Forget(key)
			if closed != nil {
				closed(nc)
			}
		}
		return nil
	}
}

// Connect dials NATS and keeps reconnecting forever: the router must
// survive a NATS restart and resume ingestion without operator action.
// Disconnects and reconnects are logged; Status reports the state for
// metrics and readiness. ctx bounds the initial dial only. extra adds
// options: credentials and TLS (ClientAuth.Options, or
// Embedded.ClientOptions for this process's own server).
func Connect(ctx context.Context, url, name string, log *slog.Logger, extra ...nats.Option) (*nats.Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w", url, err)
	}
	if log == nil {
		log = slog.Default()
	}
	log = log.With("component", "natsbus")
	// A server that keeps dropping the connection would log a pair of
	// lines per reconnect: at most one of each per 10 s, with the count
	// of those left out.
	var downLog, upLog loglimit.Limiter
	downLog.Every, upLog.Every = 10*time.Second, 10*time.Second
	opts := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.CustomReconnectDelay(reconnectDelay),
		nats.RetryOnFailedConnect(false),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err == nil { // nil: our own Close/Drain
				return
			}
			if ok, suppressed := downLog.Allow(time.Now()); ok {
				log.Warn("NATS disconnected", "name", name, "err", err, "suppressed", suppressed)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			if ok, suppressed := upLog.Allow(time.Now()); ok {
				log.Info("NATS reconnected", "name", name, "url", c.ConnectedUrl(), "suppressed", suppressed)
			}
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subject := ""
			if sub != nil {
				subject = sub.Subject
			}
			log.Warn("NATS async error", "name", name, "subject", subject, "err", err)
		}),
	}
	if dl, ok := ctx.Deadline(); ok {
		opts = append(opts, nats.Timeout(time.Until(dl)))
	}
	opts = append(opts, extra...)
	type result struct {
		nc  *nats.Conn
		err error
	}
	dialed := make(chan result, 1)
	go func() {
		nc, err := nats.Connect(url, opts...)
		dialed <- result{nc, err}
	}()
	select {
	case r := <-dialed:
		if r.err != nil {
			return nil, fmt.Errorf("connect to NATS at %s: %w", url, r.err)
		}
		return r.nc, nil
	case <-ctx.Done():
		// The dial finishes on its own; close whatever it produces.
		go func() {
			if r := <-dialed; r.nc != nil {
				r.nc.Close()
			}
		}()
		return nil, fmt.Errorf("connect to NATS at %s: %w", url, ctx.Err())
	}
}

// ConnStatus is a connection's state for metrics and readiness.
type ConnStatus struct {
	Connected  bool   // usable now
	State      string // nats.Status name: CONNECTED, RECONNECTING, CLOSED, ...
	Server     string // URL of the server it is connected to ("" if none)
	Reconnects uint64 // reconnections since it was opened
}

// Status reports nc's state.
func Status(nc *nats.Conn) ConnStatus {
	if nc == nil {
		return ConnStatus{State: nats.DISCONNECTED.String()}
	}
	return ConnStatus{
		Connected:  nc.IsConnected(),
		State:      nc.Status().String(),
		Server:     nc.ConnectedUrl(),
		Reconnects: nc.Stats().Reconnects,
	}
}

// subscribeFlushTimeout bounds awaitSubscribed.
const subscribeFlushTimeout = 2 * time.Second

// awaitSubscribed makes a new subscription effective before its starter
// returns: SUB travels asynchronously, so without a round trip messages
// published right after (from other connections) could miss it. While
// disconnected it only logs; the client re-subscribes on reconnect.
func awaitSubscribed(nc *nats.Conn, subject string, log *slog.Logger) {
	if err := nc.FlushTimeout(subscribeFlushTimeout); err != nil {
		log.Warn("subscription not confirmed by the NATS server yet", "subject", subject, "err", err)
	}
}
