package zmqevents

import (
	"errors"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/kv"
)

func TestTierOfMedium(t *testing.T) {
	tests := []struct {
		medium string
		want   kv.StorageTier
	}{
		{"", kv.TierDevice}, {"GPU", kv.TierDevice}, {"cuda", kv.TierDevice},
		{"CPU", kv.TierHostPinned}, {"host_pinned", kv.TierHostPinned},
		{"SHARED", kv.TierShared}, {"shared", kv.TierShared}, {"Shared", kv.TierShared},
		{"DISK", kv.TierDisk}, {"LocalDiskBackend", kv.TierDisk}, {"shared ", kv.TierDisk}, {"\xff", kv.TierDisk},
	}
	for _, tt := range tests {
		if got := TierOfMedium(tt.medium); got != tt.want {
			t.Errorf("medium %q: tier %s, want %s", tt.medium, got, tt.want)
		}
	}
}

// storedWithMedium is a one-block BlockStored of block size 4.
func storedWithMedium(medium string) *Batch {
	return &Batch{Events: []RawEvent{{Kind: kv.EventStored, BlockHashes: []uint64{7},
		TokenIDs: []uint32{1, 2, 3, 4}, BlockSize: 4, Medium: medium}}}
}

// Any medium string survives both encodings and converts to a valid tier
// (shared exactly for "shared" in any case); nothing panics.
func FuzzMedium(f *testing.F) {
	for _, m := range []string{"", "GPU", "CPU", "DISK", "SHARED", "shared", "LocalCPUBackend", "\x00", "\xff\xfe"} {
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
			if err != nil {
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("convert error %v does not wrap ErrMalformed", err)
				}
				continue
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
