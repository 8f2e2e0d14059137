package events

import (
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/kv"
)

// member is one key of a generated JSON object; objects keep their keys
// in a slice so the generator controls (and shuffles) their order.
type member struct {
	key string
	val any // int64/uint64 number, string, nil, []any, []member, bool, rawNum
}

// rawNum is a number written verbatim (floats, exponents).
type rawNum string

// writer emits a generated document with random whitespace.
type writer struct {
	rng *rand.Rand
	b   strings.Builder
}

func (w *writer) space() {
	for range w.rng.IntN(3) {
		w.b.WriteByte(" \n\t\r"[w.rng.IntN(4)])
	}
}

func (w *writer) value(v any) {
	w.space()
	switch v := v.(type) {
	case nil:
		w.b.WriteString("null")
	case bool:
		w.b.WriteString(strconv.FormatBool(v))
	case uint64:
		w.b.WriteString(strconv.FormatUint(v, 10))
	case int64:
		w.b.WriteString(strconv.FormatInt(v, 10))
	case rawNum:
		w.b.WriteString(string(v))
	case string:
		w.b.WriteString(strconv.Quote(v))
	case []any:
		w.b.WriteByte('[')
		for i, e := range v {
			if i > 0 {
				w.b.WriteByte(',')
			}
			w.value(e)
		}
		w.space()
		w.b.WriteByte(']')
	case []member:
		w.b.WriteByte('{')
		for i, m := range v {
			if i > 0 {
				w.b.WriteByte(',')
			}
			w.space()
			w.b.WriteString(strconv.Quote(m.key))
			w.space()
			w.b.WriteByte(':')
			w.value(m.val)
		}
		w.space()
		w.b.WriteByte('}')
	default:
		panic("unsupported generated value")
	}
	w.space()
}

// variants spells ev the many ways a publisher may: hashes above 2^63
// as negative i64, keys in any order, unknown fields with nested values,
// dp_rank inside the event or beside worker_id, optional fields absent
// or null.
type variants struct{ rng *rand.Rand }

func (g variants) hash(h uint64) any {
	if h >= 1<<63 && g.rng.IntN(2) == 0 {
		return int64(h)
	}
	return h
}

func (g variants) junk() any {
	switch g.rng.IntN(6) {
	case 0:
		return nil
	case 1:
		return rawNum("-1.25e+3")
	case 2:
		return "unknown \u00e9 \"quoted\""
	case 3:
		return []any{true, false, uint64(3), []member{{"deep", []any{}}}}
	case 4:
		return []member{}
	default:
		return []member{{"mm_hashes", []any{uint64(1), uint64(2)}}}
	}
}

func (g variants) object(ms []member) []member {
	if g.rng.IntN(2) == 0 {
		ms = append(ms, member{"extra_" + strconv.Itoa(g.rng.IntN(9)), g.junk()})
	}
	g.rng.Shuffle(len(ms), func(i, j int) { ms[i], ms[j] = ms[j], ms[i] })
	return ms
}

func (g variants) document(ev *kv.Event) []member {
	var data any
	switch ev.Kind {
	case kv.EventStored:
		blocks := make([]any, len(ev.Blocks))
		for i, b := range ev.Blocks {
			blocks[i] = g.object([]member{{"block_hash", g.hash(uint64(b.BlockHash))}, {"tokens_hash", g.hash(uint64(b.TokensHash))}})
		}
		stored := []member{{"blocks", blocks}}
		if ev.HasParent {
			stored = append(stored, member{"parent_hash", g.hash(uint64(ev.ParentHash))})
		} else if g.rng.IntN(2) == 0 {
			stored = append(stored, member{"parent_hash", nil})
		}
		data = []member{{"stored", g.object(stored)}}
	case kv.EventRemoved:
		hashes := make([]any, len(ev.Removed))
		for i, h := range ev.Removed {
			hashes[i] = g.hash(uint64(h))
		}
		data = []member{{"removed", g.object([]member{{"block_hashes", hashes}})}}
	default:
		data = "cleared"
		if g.rng.IntN(2) == 0 {
			data = []member{{"cleared", []member{}}}
		}
	}
	event := []member{{"data", data}}
	top := []member{{"worker_id", g.hash(uint64(ev.Worker.WorkerID))}}
	if ev.EventID != 0 || g.rng.IntN(2) == 0 {
		event = append(event, member{"event_id", g.hash(ev.EventID)})
	}
	switch {
	case g.rng.IntN(3) == 0:
		top = append(top, member{"dp_rank", uint64(ev.Worker.DpRank)})
	case ev.Worker.DpRank != 0 || g.rng.IntN(2) == 0:
		event = append(event, member{"dp_rank", uint64(ev.Worker.DpRank)})
	}
	if ev.Tier != kv.TierDevice || g.rng.IntN(2) == 0 {
		top = append(top, member{"storage_tier", ev.Tier.String()})
	}
	return g.object(append(top, member{"event", g.object(event)}))
}

func randomEvent(rng *rand.Rand) kv.Event {
	ev := kv.Event{
		Worker:  kv.WorkerWithDpRank{WorkerID: kv.WorkerID(rng.Uint64()), DpRank: uint32(rng.IntN(3))},
		EventID: uint64(rng.IntN(3)) * rng.Uint64(),
		Tier:    kv.StorageTier(rng.IntN(int(kv.NumTiers))),
		Kind:    kv.EventKind(1 + rng.IntN(3)),
	}
	switch ev.Kind {
	case kv.EventStored:
		if rng.IntN(2) == 0 {
			ev.HasParent, ev.ParentHash = true, kv.ExternalBlockHash(rng.Uint64())
		}
		for range 1 + rng.IntN(4) {
			ev.Blocks = append(ev.Blocks, kv.StoredBlock{BlockHash: kv.ExternalBlockHash(rng.Uint64()), TokensHash: kv.LocalBlockHash(rng.Uint64())})
		}
	case kv.EventRemoved:
		ev.Removed = []kv.ExternalBlockHash{}
		for range rng.IntN(4) {
			ev.Removed = append(ev.Removed, kv.ExternalBlockHash(rng.Uint64()))
		}
	}
	return ev
}

// The scanner and the encoding/json decoder it replaced must read every
// spelling of an event back to that event.
func TestDecodeAgreesWithEncodingJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	g := variants{rng}
	for i := range 3000 {
		want := randomEvent(rng)
		w := writer{rng: rng}
		w.value(g.document(&want))
		doc := []byte(w.b.String())
		got, err := DecodeRouterEventJSON(doc)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("case %d: scanner read %s\nas %+v (%v)\nwant %+v", i, doc, got, err, want)
		}
		ref, err := referenceDecode(doc)
		if err != nil || !reflect.DeepEqual(ref, want) {
			t.Fatalf("case %d: encoding/json read %s\nas %+v (%v)\nwant %+v", i, doc, ref, err, want)
		}
	}
}
