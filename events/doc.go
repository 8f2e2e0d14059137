// Package events decodes and encodes KV-cache events and worker heartbeats
// in the wire forms the router ingests: Dynamo's RouterEvent JSON, the
// protobuf messages of package messages, and heartbeat JSON. Decoders are
// pure, return errors that name the offending field, and never panic.
package events
