package index

import (
	"testing"

	"github.com/kvrouter/kvrouter/kv"
)

// decodeEvents turns arbitrary bytes into events over a tiny hash space so
// the fuzzer reaches conflicts quickly. A nil entry means RemoveWorker.
func decodeEvents(data []byte) []*kv.Event {
	next := func() byte {
		if len(data) == 0 {
			return 0
		}
		b := data[0]
		data = data[1:]
		return b
	}
	var out []*kv.Event
	for len(data) > 0 {
		head := next()
		r := rank(kv.WorkerID(head>>4&3), uint32(head>>6&1))
		switch head & 7 {
		case 0, 1, 2:
			ev := &kv.Event{Worker: r, Kind: kv.EventStored}
			if head&8 != 0 {
				ev.HasParent, ev.ParentHash = true, kv.ExternalBlockHash(next()&31)
			}
			for range next() % 6 {
				b := next()
				ev.Blocks = append(ev.Blocks, blk(uint64(b&31), uint64(b>>5)))
			}
			out = append(out, ev)
		case 3, 4:
			ev := &kv.Event{Worker: r, Kind: kv.EventRemoved}
			for range next() % 4 {
				ev.Removed = append(ev.Removed, kv.ExternalBlockHash(next()&31))
			}
			out = append(out, ev)
		case 5:
			out = append(out, &kv.Event{Worker: r, Kind: kv.EventCleared})
		case 6:
			out = append(out, &kv.Event{Worker: r, Kind: kv.EventKind(next()), Tier: kv.StorageTier(next())})
		default:
			out = append(out, nil)
		}
	}
	return out
}

func FuzzApply(f *testing.F) {
	f.Add([]byte{0x00, 3, 0x21, 0x42, 0x63, 0x08, 0x01, 2, 0x24, 0x45, 0x03, 1, 0x01})
	f.Add([]byte{0x10, 2, 0x01, 0x22, 0x18, 0x02, 1, 0x01, 0x05, 0x07, 0x13, 2, 0x01, 0x02})
	f.Add([]byte{0x40, 5, 1, 2, 3, 4, 1, 0x48, 4, 1, 0x44, 1, 3})
	f.Fuzz(func(t *testing.T, data []byte) {
		// One tree per fan setting: they must agree on everything.
		trees := make([]*Tree, len(fanSettings))
		for i, fs := range fanSettings {
			trees[i] = newFanTree(fs.build, fs.drop)
		}
		for _, ev := range decodeEvents(data) {
			for i, tr := range trees {
				if ev == nil {
					tr.RemoveWorker(1)
				} else if err := tr.Apply(ev); err != nil && ErrorReason(err) == "error" {
					t.Fatalf("untyped error %v", err)
				}
				if err := tr.CheckInvariants(); err != nil {
					t.Fatalf("%s: %v", fanSettings[i].name, err)
				}
			}
		}
		for i, tr := range trees[1:] {
			assertSameContent(t, fanSettings[i+1].name, trees[0], tr)
		}
		assertRebuildEqual(t, trees[0])
		_ = trees[0].FindMatches(locals(0, 1, 2, 3, 4, 5, 6, 7), true)
	})
}
