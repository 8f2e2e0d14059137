// Package bench measures routing policies against a fleet of mock
// engines: it builds deterministic workloads (shared-prefix, multi-turn,
// random, Mooncake trace replay), computes the oracle hit rate a perfect
// router with infinite cache would reach, drives the fleet under each
// policy at each offered load, and reports hit rate, TTFT, ITL and
// throughput as a table, report.json and PNG plots. It also benchmarks the
// router's indexer alone by replaying the Mooncake trace as KV events.
//
// Everything here except fleet.go and the HTTP client is plain logic over
// slices so it can be tested without a network.
package bench
