package mockengine

import (
	"errors"
	"testing"

	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/zmqevents"
)

func TestParseZMQWire(t *testing.T) {
	good := map[string]ZMQWire{
		"":                          {},
		"lora=sql":                  {LoRAName: "sql", LoRAID: 1},
		"lora=sql:7,unknown=Future": {LoRAName: "sql", LoRAID: 7, UnknownEventType: "Future"},
		"lora-id=3":                 {LoRAIDOnly: true, LoRAID: 3},
		"eagle, sglang-pages":       {EAGLEPairs: true, SGLangPages: true},
		"short-page=2,block-size=8": {SGLangPages: true, ShortPageTokens: 2, BlockSize: 8},
	}
	for in, want := range good {
		got, err := ParseZMQWire(in)
		if err != nil || got != want {
			t.Errorf("%q: %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"lora", "lora=", "eagle=1", "short-page=x", "block-size=-1", "bogus", "lora-id=a"} {
		if _, err := ParseZMQWire(in); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%q: %v, want ErrInvalidConfig", in, err)
		}
	}
	for _, w := range []ZMQWire{{ShortPageTokens: 4}, {LoRAName: "a", LoRAIDOnly: true}} {
		if err := w.validate(4); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%+v: %v, want ErrInvalidConfig", w, err)
		}
	}
}

// Each mode reshapes a two-block store as its engine would; an empty
// store is left alone.
func TestZMQWireStoredShapes(t *testing.T) {
	raw := zmqevents.RawEvent{Kind: kv.EventStored, BlockHashes: []uint64{1, 2}, TokenIDs: []uint32{1, 2, 3, 4, 5, 6, 7, 8}, BlockSize: 4, Medium: "GPU"}
	pages := ZMQWire{SGLangPages: true, ShortPageTokens: 2, EAGLEPairs: true, LoRAName: "a", LoRAID: 2}.stored(raw)
	if len(pages) != 3 {
		t.Fatalf("%d events, want two pages and a short one", len(pages))
	}
	if p := pages[1]; len(p.TokenIDs) != 4 || p.TokenIDs[0] != 5 || !p.HasParent || p.ParentHash != 1 || p.NextToken != 9 || p.ExtraLead[0] != "a" {
		t.Fatalf("second page %+v", p)
	}
	if p := pages[0]; p.NextToken != 5 || p.LoraName != "a" || !p.Bigram {
		t.Fatalf("first page %+v", p)
	}
	if s := pages[2]; s.BlockSize != 2 || len(s.TokenIDs) != 2 || s.ParentHash != 2 || s.BlockHashes[0] == 2 {
		t.Fatalf("short page %+v", s)
	}
	if got := (ZMQWire{BlockSize: 8}).stored(raw); len(got) != 1 || got[0].BlockSize != 8 {
		t.Fatalf("block size override %+v", got)
	}
	empty := zmqevents.RawEvent{Kind: kv.EventStored}
	if got := (ZMQWire{ShortPageTokens: 2, SGLangPages: true, EAGLEPairs: true}).stored(empty); len(got) != 1 {
		t.Fatalf("empty store %+v", got)
	}
}
