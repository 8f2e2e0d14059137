package routeapi

import (
	"crypto/sha256"
	"encoding/hex"
	"net"
	"net/netip"
)

// Reasons a 429 names in its JSON body ("reason").
const (
	// ReasonClientActive: the calling client holds
	// max-active-requests-per-client active requests on this replica.
	ReasonClientActive = "client_active_requests"
)

// TokenClient names the client of a request authenticated with a bearer
// token: "token:" and 16 hex digits of the token's SHA-256, so the name can
// be logged without revealing the token. Only a token the router checked
// may name a client (unchecked, a client could send a new one per request
// and escape its bound).
func TokenClient(token string) string {
	sum := sha256.Sum256([]byte(token))
	return "token:" + hex.EncodeToString(sum[:8])
}

// AddrClient names a client by its address without the port: "addr:" and
// the IP. Behind a proxy or a load balancer every client has the
// proxy's address; give them tokens to tell them apart.
func AddrClient(remoteAddr string) string {
	if ap, err := netip.ParseAddrPort(remoteAddr); err == nil {
		return "addr:" + ap.Addr().Unmap().String()
	}
	if host, _, err := net.SplitHostPort(remoteAddr); err == nil {
		return "addr:" + host
	}
	if remoteAddr == "" {
		return ""
	}
	return "addr:" + remoteAddr
}
