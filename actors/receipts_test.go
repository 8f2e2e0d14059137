package actors

import (
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/kvrouter/kvrouter/messages"
)

type receiptCounter struct {
	NopObserver
	close, explained atomic.Int64
}

func (c *receiptCounter) DecisionClose()     { c.close.Add(1) }
func (c *receiptCounter) DecisionExplained() { c.explained.Add(1) }

// The ring keeps every decision asked to explain itself and the sampled
// share of the others; the reply carries the receipt only when asked;
// ties between idle ranks count as close decisions.
func TestDecisionRing(t *testing.T) {
	for _, tc := range []struct {
		sample float64
		kept   int // of the 10 unasked decisions
	}{{0, 0}, {1, 10}} {
		t.Run(fmt.Sprint("sample=", tc.sample), func(t *testing.T) {
			obs := &receiptCounter{}
			r := startRouter(t, func(c *Config) {
				c.DecisionSample, c.DecisionRingEntries, c.DecisionRingBytes = tc.sample, 100, 1<<20
				c.Observer = obs
			})
			for id := uint64(1); id <= 2; id++ {
				if err := r.RegisterWorker(&messages.WorkerHeartbeat{WorkerId: id, DataParallelSize: 1}, true); err != nil {
					t.Fatal(err)
				}
			}
			waitWorkers(t, r, 2)
			kept := 0
			for i := range 10 {
				id := fmt.Sprint("plain-", i)
				reply, err := r.Route(ctxT(t), &messages.RouteRequest{RequestId: id, TokenIds: prompt(32, 1)})
				if err != nil {
					t.Fatal(err)
				}
				if len(reply.ReceiptJson) != 0 {
					t.Fatalf("%s: a receipt on a reply nobody asked for", id)
				}
				if _, ok := r.Decision(id); ok {
					kept++
				}
			}
			if kept != tc.kept {
				t.Fatalf("%d unasked receipts kept, want %d", kept, tc.kept)
			}
			reply, err := r.Route(ctxT(t), &messages.RouteRequest{RequestId: "asked", TokenIds: prompt(32, 2), Explain: true})
			if err != nil {
				t.Fatal(err)
			}
			held, ok := r.Decision("asked")
			if !ok || string(held) != string(reply.ReceiptJson) {
				t.Fatalf("the asked receipt: ring %s, reply %s", held, reply.ReceiptJson)
			}
			var rc struct {
				Winner string `json:"winner"`
				Close  bool   `json:"close"`
			}
			if err := json.Unmarshal(held, &rc); err != nil || rc.Winner != rankOf(reply.Worker).String() {
				t.Fatalf("receipt %s (%v): winner is not the reply's %v", held, err, reply.Worker)
			}
			if got, want := obs.explained.Load(), int64(tc.kept+1); got != want {
				t.Fatalf("explained %d, want %d", got, want)
			}
			// The first decision between two idle ranks is a tie.
			if obs.close.Load() < 1 {
				t.Fatal("no close decision counted")
			}
		})
	}
}
