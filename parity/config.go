// Package parity checks the router's view of a request against the
// engine's own answer: the prompt's token count (usage.prompt_tokens)
// and the cached tokens the engine reports
// (usage.prompt_tokens_details.cached_tokens) against the router's
// tokenization and its predicted cache hit.
//
// A Tracker keeps a sliding window of the last requests per served model
// (did the counts match?) and per worker rank (how many predicted cached
// tokens did the engine confirm?). When a model's mismatches cross a
// threshold over its window, the tracker says to switch that model to
// engine-side tokenization; it says to switch back after an operator
// reset or a clean window of background checks. It holds no goroutines
// and reads no clock: the caller passes the time.
package parity

import (
	"errors"
	"fmt"
	"time"
)

// Config holds the tracker's knobs (config's --parity-* flags).
type Config struct {
	// Window is how many of a model's latest router-tokenized requests
	// (and of a rank's latest predicted hits) are judged together.
	Window int
	// MinSamples is how many requests the window must hold before a
	// model can be switched (a few early mismatches do not decide).
	MinSamples int
	// MismatchThreshold is the fraction of the window's requests whose
	// engine prompt_tokens differ from the router's count above which
	// the model is switched to engine tokenization.
	MismatchThreshold float64
	// CleanWindow is how many consecutive background checks (the
	// router's own tokenization of a served request against the engine's
	// prompt_tokens) must match for a switched model to go back to
	// router tokenization by itself; 0 leaves it to the operator.
	CleanWindow int
	// AutoSwitch enables the switch; without it mismatches are measured
	// and logged only.
	AutoSwitch bool
	// RankIdle drops a rank's window when no request went to it for this
	// long (workers come and go; their ids are not reused).
	RankIdle time.Duration
}

// Defaults of the --parity-* flags.
const (
	DefaultWindow            = 50
	DefaultMinSamples        = 10
	DefaultMismatchThreshold = 0.2
	DefaultCleanWindow       = 20
	DefaultRankIdle          = 10 * time.Minute
)

// DefaultConfig returns the defaults: switch automatically.
func DefaultConfig() Config {
	return Config{
		Window: DefaultWindow, MinSamples: DefaultMinSamples, MismatchThreshold: DefaultMismatchThreshold,
		CleanWindow: DefaultCleanWindow, AutoSwitch: true, RankIdle: DefaultRankIdle,
	}
}

// ErrInvalidConfig marks every configuration error.
var ErrInvalidConfig = errors.New("invalid parity config")

// Validate reports the first knob out of range.
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	switch {
	case c.Window < 1 || c.Window > 1<<16:
		return bad("window %d not in [1, 65536]", c.Window)
	case c.MinSamples < 1 || c.MinSamples > c.Window:
		return bad("min samples %d not in [1, window %d]", c.MinSamples, c.Window)
	case !(c.MismatchThreshold >= 0 && c.MismatchThreshold < 1):
		return bad("mismatch threshold %v not in [0, 1)", c.MismatchThreshold)
	case c.CleanWindow < 0:
		return bad("clean window %d must not be negative", c.CleanWindow)
	case c.RankIdle <= 0:
		return bad("rank idle %v must be positive", c.RankIdle)
	}
	return nil
}
