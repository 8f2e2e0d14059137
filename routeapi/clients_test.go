package routeapi

import (
	"strings"
	"testing"
)

func TestClientNames(t *testing.T) {
	for _, tt := range []struct{ remote, want string }{
		{"10.1.2.3:5555", "addr:10.1.2.3"},
		{"[::ffff:10.1.2.3]:80", "addr:10.1.2.3"}, // one client whatever the socket family
		{"[2001:db8::1]:443", "addr:2001:db8::1"},
		{"@", "addr:@"}, // a unix socket's peer
		{"", ""},
	} {
		if got := AddrClient(tt.remote); got != tt.want {
			t.Errorf("AddrClient(%q) = %q, want %q", tt.remote, got, tt.want)
		}
	}
	a, b := TokenClient("secret-token-aaaaaaaa"), TokenClient("secret-token-bbbbbbbb")
	if a == b || !strings.HasPrefix(a, "token:") || len(a) != len("token:")+16 || strings.Contains(a, "secret") {
		t.Errorf("token names %q, %q: want distinct token:<16 hex> names that do not reveal the token", a, b)
	}
	if TokenClient("secret-token-aaaaaaaa") != a {
		t.Error("the same token named twice differently")
	}
}
