package replica

import (
	"testing"

	"github.com/kvrouter/kvrouter/config"
	"github.com/kvrouter/kvrouter/httpapi"
)

// TestMigrationLimitFlag: --migration-limit 0 (documented: failures go
// to the client) reaches the proxy as "off", not as Options' zero value
// (the default), and the flag's default is the proxy's.
func TestMigrationLimitFlag(t *testing.T) {
	for _, c := range []struct{ flag, want int }{{0, -1}, {1, 1}, {3, 3}, {16, 16}} {
		if got := migrationLimit(c.flag); got != c.want {
			t.Errorf("--migration-limit %d: Options.MigrationLimit %d, want %d", c.flag, got, c.want)
		}
	}
	if d := config.Default().MigrationLimit; d != httpapi.DefaultMigrationLimit {
		t.Errorf("--migration-limit defaults to %d, the proxy to %d", d, httpapi.DefaultMigrationLimit)
	}
}
