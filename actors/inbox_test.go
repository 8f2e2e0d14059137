package actors

import (
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

type echoAfter struct {
	delay time.Duration
	text  string
}

// A call that timed out must not hand its late reply to the next call
// (its inbox is dropped), and inboxes whose call was answered are reused.
func TestInboxLateReplyGoesNowhere(t *testing.T) {
	sys := actor.NewActorSystem()
	defer sys.Shutdown()
	pid := sys.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		if m, ok := ctx.Message().(*echoAfter); ok {
			sender := ctx.Sender()
			time.AfterFunc(m.delay, func() { sys.Root.Send(sender, m.text) })
		}
	}))
	p := newInboxes(sys)
	if _, ok := p.call(sys.Root, pid, &echoAfter{delay: 200 * time.Millisecond, text: "late"}, 20*time.Millisecond); ok {
		t.Fatal("the slow call must time out")
	}
	for i := range 5 {
		res, ok := p.call(sys.Root, pid, &echoAfter{delay: 100 * time.Millisecond, text: "on time"}, 2*time.Second)
		if !ok || res != "on time" {
			t.Fatalf("call %d: got %v, %v: a late reply reached another call", i, res, ok)
		}
	}
	if len(p.free) != 1 {
		t.Fatalf("%d inboxes free after sequential answered calls, want the one reused", len(p.free))
	}
}
