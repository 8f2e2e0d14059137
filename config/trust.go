package config

import (
	"github.com/kvrouter/kvrouter/trust"
)

// indexTrust maps the index-trust flags onto the trust rules (checked by
// actors.Config.Validate when enabled).
func (c *Config) indexTrust() trust.Config {
	return trust.Config{
		Enabled: c.IndexTrust, GapGrace: c.IndexTrustGapGrace, StaleAfter: c.IndexTrustStaleAfter,
		RefusedWindow: c.IndexTrustRefusedWindow, RefusedUntrusted: c.IndexTrustRefusedUntrusted,
		ParityWindow: c.IndexTrustParityWindow, ParityDegraded: c.IndexTrustParityDegraded,
		ParityUntrusted: c.IndexTrustParityUntrusted, ParityClean: c.IndexTrustParityClean,
		FallbackTTL: c.IndexTrustFallbackTTL,
	}
}
