package zmqevents

import (
	"context"
	"fmt"
	"io"
	"log"
	"time"

	"github.com/go-zeromq/zmq4"
)

// Replay asks a vLLM replay ROUTER for every buffered batch with a
// sequence number >= start and calls fn for each, in the order sent, until
// the end marker (sequence EndSeq with an empty payload) or until fn
// returns an error, which Replay returns. A fresh DEALER
// per request means a timed-out replay can never leak late replies into
// the next one.
func Replay(ctx context.Context, endpoint string, start uint64, timeout time.Duration, fn func(seq uint64, payload []byte) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	d := zmq4.NewDealer(ctx, zmq4.WithLogger(log.New(io.Discard, "", 0)), zmq4.WithDialerMaxRetries(0))
	defer d.Close()
	if err := d.Dial(endpoint); err != nil {
		return fmt.Errorf("replay from %s: %w", endpoint, err)
	}
	// The ROUTER expects [identity, "", seq]; the DEALER supplies the
	// identity, we supply the empty delimiter.
	if err := d.SendMulti(zmq4.NewMsgFrom([]byte{}, EncodeSeq(start))); err != nil {
		return fmt.Errorf("replay request to %s: %w", endpoint, err)
	}
	for {
		msg, err := d.Recv()
		if err != nil {
			return fmt.Errorf("replay from %s: %w", endpoint, err)
		}
		frames := msg.Frames
		if len(frames) == 3 && len(frames[0]) == 0 {
			frames = frames[1:]
		}
		if len(frames) != 2 {
			return fmt.Errorf("replay from %s: %w", endpoint, malformed("reply of %d frames, want [\"\", seq, payload]", len(msg.Frames)))
		}
		seq, err := DecodeSeq(frames[0])
		if err != nil {
			return fmt.Errorf("replay from %s: %w", endpoint, err)
		}
		if seq == EndSeq {
			return nil
		}
		if err := fn(seq, frames[1]); err != nil {
			return err
		}
	}
}
