package config

import "fmt"

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
	return errs
}
