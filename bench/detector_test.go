package bench

import (
	"strings"
	"testing"
)

const detectorPage = `# HELP kvrouter_cluster_suspicions_total Counter cluster_suspicions by source.
# TYPE kvrouter_cluster_suspicions_total counter
kvrouter_cluster_suspicions_total{source="memberlist"} 3
# TYPE kvrouter_cluster_refutations_total counter
kvrouter_cluster_refutations_total{source="memberlist"} 2
# TYPE kvrouter_cluster_deaths_total counter
kvrouter_cluster_deaths_total{source="memberlist"} 1
# TYPE kvrouter_cluster_false_deaths_total counter
kvrouter_cluster_false_deaths_total{source="memberlist"} 1
# TYPE kvrouter_gossip_batches_total counter
kvrouter_gossip_batches_total{source="memberlist"} 99
`

func TestParseDetector(t *testing.T) {
	d, err := ParseDetector(strings.NewReader(detectorPage))
	if err != nil {
		t.Fatal(err)
	}
	if want := (DetectorCounts{Suspicions: 3, Refutations: 2, Deaths: 1, FalseDeaths: 1}); d != want {
		t.Fatalf("got %+v, want %+v", d, want)
	}
	// A replica without a cluster has none of them.
	if d, err := ParseDetector(strings.NewReader("# TYPE x_total counter\nx_total 1\n")); err != nil || d != (DetectorCounts{}) {
		t.Fatalf("no cluster: %+v, %v", d, err)
	}
	if _, err := ParseDetector(strings.NewReader("kvrouter_cluster_deaths_total{ 1\n")); err == nil {
		t.Fatal("a malformed page parsed")
	}
}

func FuzzParseDetector(f *testing.F) {
	f.Add(detectorPage)
	f.Add("kvrouter_cluster_deaths_total -1\n")
	f.Fuzz(func(t *testing.T, page string) {
		_, _ = ParseDetector(strings.NewReader(page)) // must not panic
	})
}
