package config

import (
	"errors"
	"fmt"

	"github.com/kvrouter/kvrouter/natsbus"
)

// validateNATS checks the NATS, JetStream and data-dir settings.
func (c *Config) validateNATS() []error {
	var errs []error
	if c.JetStream && c.NATSURL == "" && c.DataDir == "" {
		errs = append(errs, fmt.Errorf("data-dir must be set for the embedded NATS's JetStream store"))
	}
	if c.KVEventsMaxMsgs > 0 && c.RouterSnapshotThreshold > 0 && uint64(c.KVEventsMaxMsgs) <= c.RouterSnapshotThreshold {
		errs = append(errs, fmt.Errorf("kv-events-max-msgs %d must be above router-snapshot-threshold %d: the stream would discard events before a snapshot keeps them",
			c.KVEventsMaxMsgs, c.RouterSnapshotThreshold))
	}
	if c.NATSPasswordFile != "" && c.NATSPassword != "" {
		errs = append(errs, fmt.Errorf("give the NATS password once: nats-password-file or %s", EnvName("nats-password")))
	}
	shape := c.clientAuth()
	if c.NATSPasswordFile != "" {
		shape.Password = "(from file)" // read at start
	}
	if err := shape.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.NATSURL == "" {
		// The embedded server: the same check as natsbus.StartEmbedded,
		// early, where no server config file could add authentication.
		hasAuth := c.NATSUser != "" || c.NATSNkey != "" || c.NATSServerConfig != ""
		if !hasAuth && !c.NATSInsecure && !natsbus.LoopbackListen(c.NATSListen) {
			errs = append(errs, natsbus.InsecureListenError(c.NATSListen))
		}
		if c.NATSCreds != "" && c.NATSServerConfig == "" {
			errs = append(errs, errors.New("nats-creds authenticates to a NATS in operator mode: the embedded server needs "+
				"nats-server-config with the operator and resolver (or use nats-user or nats-nkey)"))
		}
	}
	return errs
}

func (c *Config) clientAuth() natsbus.ClientAuth {
	return natsbus.ClientAuth{
		CredsFile: c.NATSCreds, NkeySeedFile: c.NATSNkey, User: c.NATSUser, Password: c.NATSPassword,
		TLSCA: c.NATSTLSCA, TLSCert: c.NATSTLSCert, TLSKey: c.NATSTLSKey,
	}
}

// NATSAuth is the router's NATS credentials and TLS files, with the
// password read from nats-password-file (or KVROUTER_NATS_PASSWORD).
func (c *Config) NATSAuth() (natsbus.ClientAuth, error) {
	a := c.clientAuth()
	if c.NATSPasswordFile != "" {
		p, err := natsbus.ReadSecretFile(c.NATSPasswordFile)
		if err != nil {
			return a, fmt.Errorf("nats-password-file: %w", err)
		}
		a.Password = p
	}
	return a, a.Validate()
}
