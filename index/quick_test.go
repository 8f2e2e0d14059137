package index

import (
	"hash/fnv"
	"maps"
	"math/rand"
	"reflect"
	"strings"
	"testing"
	"testing/quick"

	"github.com/kvrouter/kvrouter/kv"
)

// The reference model: every rank holds a set of paths (strings over a
// small alphabet of local hashes). Engine hashes are a function of the path,
// as with vLLM's chained block hashes, so they never conflict.
type model map[kv.WorkerWithDpRank]map[string]bool

func pathExt(path string) kv.ExternalBlockHash {
	h := fnv.New64a()
	h.Write([]byte(path))
	return kv.ExternalBlockHash(h.Sum64() | 1)
}

type op struct {
	Rank   kv.WorkerWithDpRank
	Kind   kv.EventKind
	Parent string // "" = root
	Add    string // Stored: local hashes appended, one byte each
	Remove []string
}

// script is a random sequence of well-formed events plus queries.
type script struct {
	Ops     []op
	Queries []string
}

const alphabet = "abc"

func randPath(r *rand.Rand, maxLen int) string {
	var b strings.Builder
	for range r.Intn(maxLen + 1) {
		b.WriteByte(alphabet[r.Intn(len(alphabet))])
	}
	return b.String()
}

func (script) Generate(r *rand.Rand, size int) reflect.Value {
	var s script
	for range 5 + r.Intn(5*size+1) {
		o := op{Rank: rank(kv.WorkerID(r.Intn(3)), uint32(r.Intn(2)))}
		switch p := r.Intn(10); {
		case p < 6:
			o.Kind = kv.EventStored
			o.Parent = randPath(r, 3)
			o.Add = randPath(r, 3)
			if o.Add == "" {
				o.Add = "a"
			}
		case p < 9:
			o.Kind = kv.EventRemoved
			for range 1 + r.Intn(3) {
				o.Remove = append(o.Remove, randPath(r, 5))
			}
		default:
			o.Kind = kv.EventCleared
		}
		s.Ops = append(s.Ops, o)
	}
	for range 8 {
		s.Queries = append(s.Queries, randPath(r, 7))
	}
	return reflect.ValueOf(s)
}

func (m model) apply(o op) {
	switch o.Kind {
	case kv.EventStored:
		if o.Parent != "" && !m[o.Rank][o.Parent] {
			return // parent unknown: whole event skipped
		}
		if m[o.Rank] == nil {
			m[o.Rank] = map[string]bool{}
		}
		for i := range o.Add {
			m[o.Rank][o.Parent+o.Add[:i+1]] = true
		}
	case kv.EventRemoved:
		for _, p := range o.Remove {
			if p == "" || !m[o.Rank][p] {
				continue
			}
			for q := range m[o.Rank] {
				if strings.HasPrefix(q, p) {
					delete(m[o.Rank], q)
				}
			}
		}
	case kv.EventCleared:
		if _, ok := m[o.Rank]; ok {
			m[o.Rank] = map[string]bool{}
		}
	}
}

func (m model) scores(query string) map[kv.WorkerWithDpRank]uint32 {
	out := map[kv.WorkerWithDpRank]uint32{}
	for r, paths := range m {
		k := 0
		for k < len(query) && paths[query[:k+1]] {
			k++
		}
		if k > 0 {
			out[r] = uint32(k)
		}
	}
	return out
}

func (o op) event() *kv.Event {
	ev := &kv.Event{Worker: o.Rank, Kind: o.Kind}
	switch o.Kind {
	case kv.EventStored:
		if o.Parent != "" {
			ev.HasParent, ev.ParentHash = true, pathExt(o.Parent)
		}
		for i := range o.Add {
			p := o.Parent + o.Add[:i+1]
			ev.Blocks = append(ev.Blocks, kv.StoredBlock{BlockHash: pathExt(p), TokensHash: kv.LocalBlockHash(o.Add[i])})
		}
	case kv.EventRemoved:
		for _, p := range o.Remove {
			ev.Removed = append(ev.Removed, pathExt(p))
		}
	}
	return ev
}

func toLocal(s string) []kv.LocalBlockHash {
	out := make([]kv.LocalBlockHash, len(s))
	for i := range s {
		out[i] = kv.LocalBlockHash(s[i])
	}
	return out
}

// TestFindMatchesAgainstModel runs with the default fan thresholds and
// with fans on nodes of one or two children, since the model's alphabet
// never makes a node wide enough for the default.
func TestFindMatchesAgainstModel(t *testing.T) {
	for _, f := range fanSettings {
		t.Run(f.name, func(t *testing.T) { checkAgainstModel(t, f.build, f.drop) })
	}
}

func checkAgainstModel(t *testing.T, fanBuild, fanDrop int) {
	property := func(s script) bool {
		tr, m := newFanTree(fanBuild, fanDrop), model{}
		for _, o := range s.Ops {
			_ = tr.Apply(o.event()) // errors are expected for unknown parents/hashes
			m.apply(o)
		}
		if err := tr.CheckInvariants(); err != nil {
			t.Log(err)
			return false
		}
		size := 0
		for _, paths := range m {
			size += len(paths)
		}
		if size != tr.Len() {
			t.Logf("len %d, model %d", tr.Len(), size)
			return false
		}
		for _, q := range s.Queries {
			want := m.scores(q)
			for _, early := range []bool{false, true} {
				if got := tr.FindMatches(toLocal(q), early).Scores; !maps.Equal(got, want) {
					t.Logf("query %q early=%v: got %v, want %v", q, early, got, want)
					return false
				}
			}
		}
		return true
	}
	if err := quick.Check(property, &quick.Config{MaxCount: 400, Rand: rand.New(rand.NewSource(7))}); err != nil {
		t.Fatal(err)
	}
}
