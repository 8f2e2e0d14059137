package zmqevents

import (
	"errors"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/kv"
)

func TestTierOfMedium(t *testing.T) {
	// Dynamo's table (dynamo-kv-router protocols.rs, StorageTier::
	// from_kv_medium): GPU|DEVICE device; CPU|CPU_PINNED|CPU_TIER1 host
	// pinned; CPU_TIER2|DISK|NVME|STORAGE disk; EXTERNAL|NETWORK|REMOTE
	// external, which Dynamo scores exactly as disk.
	tests := []struct {
		medium string
		want   kv.StorageTier
		ok     bool
	}{
		{"", kv.TierDevice, true}, {"GPU", kv.TierDevice, true}, {"cuda", kv.TierDevice, true}, {"DEVICE", kv.TierDevice, true},
		{"CPU", kv.TierHostPinned, true}, {"host_pinned", kv.TierHostPinned, true},
		{"CPU_PINNED", kv.TierHostPinned, true}, {"CPU_TIER1", kv.TierHostPinned, true},
		{"CPU_TIER2", kv.TierDisk, true}, {"NVME", kv.TierDisk, true}, {"STORAGE", kv.TierDisk, true},
		{"EXTERNAL", kv.TierDisk, true}, {"NETWORK", kv.TierDisk, true}, {"REMOTE", kv.TierDisk, true},
		{"SHARED", kv.TierShared, true}, {"shared", kv.TierShared, true}, {"Shared", kv.TierShared, true},
		{"DISK", kv.TierDisk, true},
		{"LocalDiskBackend", 0, false}, {"shared ", 0, false}, {"\xff", 0, false}, {"CPU_TIER3", 0, false},
	}
	for _, tt := range tests {
		got, ok := TierOfMedium(tt.medium)
		if ok != tt.ok || (ok && got != tt.want) {
			t.Errorf("medium %q: tier %s %v, want %s %v", tt.medium, got, ok, tt.want, tt.ok)
		}
	}
}

// storedWithMedium is a one-block BlockStored of block size 4.
func storedWithMedium(medium string) *Batch {
	return &Batch{Events: []RawEvent{{Kind: kv.EventStored, BlockHashes: []uint64{7},
		TokenIDs: []uint32{1, 2, 3, 4}, BlockSize: 4, Medium: medium}}}
}

// Any medium string survives both encodings and converts to a valid tier
// (shared exactly for "shared" in any case) or is refused as unknown;
// nothing panics.
func FuzzMedium(f *testing.F) {
	for _, m := range []string{"", "GPU", "CPU", "DISK", "SHARED", "shared", "LocalCPUBackend", "\x00", "\xff\xfe",
		"CPU_PINNED", "CPU_TIER1", "CPU_TIER2", "EXTERNAL", "nvme", "Remote"} {
		f.Add(m)
	}
	conv := Converter{BlockSize: 4}
	f.Fuzz(func(t *testing.T, medium string) {
		for _, enc := range []Encoding{EncodingArray, EncodingMap} {
			data, err := EncodeBatch(storedWithMedium(medium), enc)
			if err != nil {
				t.Fatalf("%s encode: %v", enc, err)
			}
			b, err := DecodeBatch(data)
			if err != nil {
				t.Fatalf("%s decode: %v", enc, err)
			}
			if len(b.Events) != 1 || b.Events[0].Medium != medium {
				t.Fatalf("%s: decoded %+v, want medium %q", enc, b.Events, medium)
			}
			ev, err := conv.Convert(&b.Events[0], kv.WorkerWithDpRank{WorkerID: 1}, 0)
			if _, known := TierOfMedium(medium); !known {
				if !errors.Is(err, ErrUnknownMedium) || ReasonOf(err) != ReasonUnknownMedium {
					t.Fatalf("medium %q: convert error %v, want ErrUnknownMedium", medium, err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("medium %q: %v", medium, err)
			}
			if err := ev.Validate(); err != nil {
				t.Fatalf("converted event invalid: %v", err)
			}
			if (ev.Tier == kv.TierShared) != strings.EqualFold(medium, "shared") {
				t.Fatalf("medium %q converted to tier %s", medium, ev.Tier)
			}
		}
	})
}

// A medium that is not a string is malformed in both encodings.
func TestMediumNotAString(t *testing.T) {
	for _, hex := range []string{
		// ["BlockStored", [7], nil, [1,2,3,4], 4, nil, 5] in a batch [ts, [event]]
		"92 00 91 97 ab 426c6f636b53746f726564 91 07 c0 94 01 02 03 04 04 c0 05",
		// same with the medium an array
		"92 00 91 97 ab 426c6f636b53746f726564 91 07 c0 94 01 02 03 04 04 c0 90",
	} {
		if _, err := DecodeBatch(unhex(t, hex)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err = %v, want ErrMalformed", hex, err)
		}
	}
}

// The fixture of TestMediumNotAString decodes with a string medium, so
// its failures are the medium's.
func TestMediumFixtureValid(t *testing.T) {
	b, err := DecodeBatch(unhex(t, "92 00 91 97 ab 426c6f636b53746f726564 91 07 c0 94 01 02 03 04 04 c0 a6 534841524544"))
	if err != nil || len(b.Events) != 1 || b.Events[0].Medium != "SHARED" {
		t.Fatalf("%+v, %v", b, err)
	}
}
