package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The replica's own /metrics names it, so a dashboard can group a local
// cluster's series by replica without a scrape-time relabel.
func TestReplicaInfo(t *testing.T) {
	m := New()
	if err := m.SetReplica("router-a-1f2e"); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP kvrouter_replica_info Always 1; its replica label is this replica's cluster name (join on instance to name a replica's series).
# TYPE kvrouter_replica_info gauge
kvrouter_replica_info{replica="router-a-1f2e"} 1
`
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), "kvrouter_replica_info"); err != nil {
		t.Fatal(err)
	}
	if err := m.SetReplica("router-a-1f2e"); err == nil {
		t.Fatal("the same replica registered twice")
	}
}
