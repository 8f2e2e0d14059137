package replica

import (
	"net"

	"github.com/kvrouter/kvrouter/connguard"
)

// httpRefused is what a client refused by the HTTP listener's per-client
// cap reads before the connection closes.
var httpRefused = []byte("HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: 78\r\n\r\n" +
	`{"error":"too many connections from this client (http-max-conns-per-client)"}` + "\n")

// guardListener wraps a client-facing listener with its total cap, the
// per-client cap and the unauthenticated idle limit (connguard). Who
// reaches it: any client of the listener; bounds: max connections in
// total, perClient per address (IPv6 /64) outside conn-limit-exempt.
func (r *Replica) guardListener(ln net.Listener, name string, max, perClient int, armOnAccept bool, refuse []byte) *connguard.Listener {
	exempt, _ := r.cfg.ConnExemptPrefixes() // checked by Config.Validate
	return connguard.Wrap(ln, connguard.Config{
		Name: name, MaxConns: max, MaxPerClient: perClient, Exempt: exempt,
		UnauthIdle: r.cfg.UnauthIdleTimeout, ArmOnAccept: armOnAccept, RefuseMessage: refuse,
		OnRefuse: func(reason string) { r.metrics.ConnRefused(name, reason) },
		Log:      r.log,
	})
}
