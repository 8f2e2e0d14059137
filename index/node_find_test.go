package index

import (
	"math/rand/v2"
	"sort"
	"testing"
)

// TestFindMatchesASortedSearch checks find, whose large-set path narrows
// by the ids' ends and one interpolated probe, against the standard
// library's binary search, on sets from dense (a fleet-wide prefix) to
// sparse and clustered, probing every id in and around each set.
func TestFindMatchesASortedSearch(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 9))
	shapes := []struct {
		name string
		ids  func(size int) []uint32
	}{
		{"dense", func(size int) []uint32 { return spanIDs(0, size) }},
		{"dense-offset", func(size int) []uint32 { return spanIDs(500, size) }},
		{"sparse", func(size int) []uint32 { return randomIDs(rng, size, 8*size+1) }},
		{"nearly-dense", func(size int) []uint32 { return randomIDs(rng, size, size+size/10+1) }},
		{"clustered", func(size int) []uint32 {
			ids := spanIDs(0, size/2)
			return append(ids, spanIDs(1<<20, size-size/2)...)
		}},
		{"extremes", func(size int) []uint32 {
			ids := spanIDs(0, size-1)
			return append(ids, ^uint32(0))
		}},
	}
	for _, shape := range shapes {
		for _, size := range []int{1, 2, interpolateFrom, interpolateFrom + 1, 40, 1000} {
			ids := shape.ids(size)
			hs := make([]holder, len(ids))
			for i, id := range ids {
				hs[i].id = id
			}
			probes := []uint32{0, 1, ^uint32(0), ^uint32(0) - 1, 1 << 20, 1<<20 - 1}
			for _, id := range ids {
				probes = append(probes, id, id+1, id-1)
			}
			for range 200 {
				probes = append(probes, rng.Uint32N(ids[len(ids)-1]+2))
			}
			for _, id := range probes {
				want := sort.Search(len(ids), func(i int) bool { return ids[i] >= id })
				wantOK := want < len(ids) && ids[want] == id
				got, ok := findHolder(hs, id)
				if got != want || ok != wantOK {
					t.Fatalf("%s, %d holders: find(%d) = %d, %v; want %d, %v", shape.name, size, id, got, ok, want, wantOK)
				}
			}
		}
	}
}

func spanIDs(from uint32, size int) []uint32 {
	ids := make([]uint32, size)
	for i := range ids {
		ids[i] = from + uint32(i)
	}
	return ids
}

// randomIDs returns size distinct sorted ids below limit.
func randomIDs(rng *rand.Rand, size, limit int) []uint32 {
	picked := rng.Perm(limit)[:size]
	ids := make([]uint32, size)
	for i, v := range picked {
		ids[i] = uint32(v)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}
