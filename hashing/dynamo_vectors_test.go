package hashing

import (
	"bytes"
	"encoding/json"
	"os"
	"slices"
	"testing"

	"github.com/zeebo/xxh3"

	"github.com/kvrouter/kvrouter/kv"
)

// Independent vectors. testdata/vectors.json is NOT recorded from this
// package: testdata/gen_vectors.py computes it with Debian's python3-xxhash
// (C libxxhash) following the byte layout of Dynamo's kv-router
// (lib/kv-router/src/protocols.rs: compute_block_hash_for_seq,
// compute_seq_hash_for_block; sources and commits are listed in the
// script's docstring), and refuses to write the file unless its own
// implementation reproduces the two hash values Dynamo publishes (the
// "published" entries, which this test checks again). With --rust it also
// recomputes every xxh3 call with xxhash-rust, the crate Dynamo links.
//
// Regenerate (from the repository root, needs `apt-get install python3-xxhash`):
//
//	/usr/bin/python3 hashing/testdata/gen_vectors.py
//	/usr/bin/python3 hashing/testdata/gen_vectors.py --check --rust   # optional cross-check
//
// Go tests read the committed JSON only; no Python is needed at test time.

type dynamoVectors struct {
	Published []struct {
		Name      string   `json:"name"`
		Source    string   `json:"source"`
		Kind      string   `json:"kind"`
		Data      string   `json:"data"`
		Tokens    []uint32 `json:"tokens"`
		BlockSize int      `json:"block_size"`
		Expected  any      `json:"expected"`
	} `json:"published"`
	SaltedSeeds []struct {
		LoraName string `json:"lora_name"`
		Seed     uint64 `json:"seed"`
	} `json:"salted_seeds"`
	Cases []struct {
		Name           string     `json:"name"`
		BlockSize      int        `json:"block_size"`
		LoraName       string     `json:"lora_name"`
		ExtraKeys      [][]uint64 `json:"extra_keys"`
		Tokens         []uint32   `json:"tokens"`
		BlockHashes    []uint64   `json:"block_hashes"`
		SequenceHashes []uint64   `json:"sequence_hashes"`
	} `json:"cases"`
}

func loadDynamoVectors(t *testing.T) dynamoVectors {
	t.Helper()
	raw, err := os.ReadFile("testdata/vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var v dynamoVectors
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber() // the "expected" fields hold u64s beyond float64 precision
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("testdata/vectors.json: %v", err)
	}
	if len(v.Published) == 0 || len(v.Cases) == 0 || len(v.SaltedSeeds) == 0 {
		t.Fatal("testdata/vectors.json has no vectors")
	}
	return v
}

func numberU64(t *testing.T, x any) uint64 {
	t.Helper()
	n, ok := x.(json.Number)
	if !ok {
		t.Fatalf("expected a JSON number, got %T", x)
	}
	var u uint64
	if err := json.Unmarshal([]byte(n), &u); err != nil {
		t.Fatal(err)
	}
	return u
}

// TestDynamoPublishedVectors checks the values Dynamo itself publishes.
func TestDynamoPublishedVectors(t *testing.T) {
	for _, p := range loadDynamoVectors(t).Published {
		t.Run(p.Name, func(t *testing.T) {
			switch p.Kind {
			case "xxh3_seed_1337":
				want := numberU64(t, p.Expected)
				if got := xxh3.HashSeed([]byte(p.Data), Seed); got != want {
					t.Errorf("xxh3(%q, %d) = %d, Dynamo publishes %d (%s)", p.Data, Seed, got, want, p.Source)
				}
			case "block_hashes":
				list, ok := p.Expected.([]any)
				if !ok {
					t.Fatalf("expected a list, got %T", p.Expected)
				}
				var want []uint64
				for _, x := range list {
					want = append(want, numberU64(t, x))
				}
				got := locals(BlockHashes(p.Tokens, p.BlockSize, Options{}))
				if !slices.Equal(got, want) {
					t.Errorf("BlockHashes = %v, Dynamo publishes %v (%s)", got, want, p.Source)
				}
			default:
				t.Fatalf("unknown kind %q", p.Kind)
			}
		})
	}
}

func TestDynamoSaltedSeedVectors(t *testing.T) {
	for _, s := range loadDynamoVectors(t).SaltedSeeds {
		if got := SaltedSeed(s.LoraName); got != s.Seed {
			t.Errorf("SaltedSeed(%q) = %d, want %d", s.LoraName, got, s.Seed)
		}
	}
}

func TestDynamoBlockAndSequenceVectors(t *testing.T) {
	for _, c := range loadDynamoVectors(t).Cases {
		t.Run(c.Name, func(t *testing.T) {
			opts := Options{LoraName: c.LoraName, ExtraKeys: c.ExtraKeys}
			local := BlockHashes(c.Tokens, c.BlockSize, opts)
			if got := locals(local); !slices.Equal(got, c.BlockHashes) {
				t.Errorf("block hashes\n got %v\nwant %v", got, c.BlockHashes)
			}
			appended := AppendBlockHashes([]kv.LocalBlockHash{42}, c.Tokens, c.BlockSize, opts)
			if !slices.Equal(appended[1:], local) || appended[0] != 42 {
				t.Error("AppendBlockHashes disagrees with BlockHashes")
			}
			if got := BlockCount(len(c.Tokens), c.BlockSize); got != len(c.BlockHashes) {
				t.Errorf("BlockCount = %d, want %d", got, len(c.BlockHashes))
			}
			var seq []uint64
			for _, h := range SequenceHashes(local) {
				seq = append(seq, uint64(h))
			}
			if !slices.Equal(seq, c.SequenceHashes) {
				t.Errorf("sequence hashes\n got %v\nwant %v", seq, c.SequenceHashes)
			}
		})
	}
}

// The extra-keys slices handed to BlockHashes must not be reordered in place.
func TestDynamoVectorsDoNotMutateExtraKeys(t *testing.T) {
	keys := [][]uint64{{9, 3}}
	BlockHashes(seq(16, 0), 16, Options{ExtraKeys: keys})
	if keys[0][0] != 9 || keys[0][1] != 3 {
		t.Errorf("extra keys were reordered: %v", keys[0])
	}
}

func locals(hs []kv.LocalBlockHash) []uint64 {
	var out []uint64
	for _, h := range hs {
		out = append(out, uint64(h))
	}
	return out
}
