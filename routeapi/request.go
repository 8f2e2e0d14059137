package routeapi

import (
	"crypto/rand"
	"encoding/hex"
	"errors"

	"github.com/kvrouter/kvrouter/decide"
	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/scheduling"
)

// Route is a route request as an API decoded it.
type Route struct {
	RequestID string
	// Tokens is the prompt; HasTokens says the client sent the field at
	// all (JSON can tell a missing array from an empty one).
	Tokens    []uint32
	HasTokens bool
	LoraName  string
	// UpdateStates nil means true (the APIs' default).
	UpdateStates         *bool
	Pinned               *messages.WorkerRank
	AllowedWorkerIDs     []uint64
	ExpectedOutputTokens uint64
	PriorityJump         float64
	Override             *messages.RouterConfigOverride
	// SessionID is the sticky-session id ("" = none).
	SessionID string
	// Model is the served model (selects the policy file's pipeline;
	// "" = the default pipeline); Explain asks for the route receipt.
	Model   string
	Explain bool
}

// Messages of invalid requests, the same over both APIs.
const (
	MsgTokensRequired = "token_ids is required (or prompt or messages, with a tokenizer)"
	// MsgTokensEmpty is decide.ErrTokensEmpty's text (the scheduler
	// applies the same rule).
	MsgTokensEmpty     = "token_ids must not be empty"
	MsgQueryTokens     = "token_ids is required and must not be empty (or prompt or messages, with a tokenizer)"
	MsgRequestIDNeeded = "request_id is required"
	MsgModelTooLong    = "model is longer than 256 bytes"
)

// MaxModelBytes bounds a route request's model name.
const MaxModelBytes = 256

// RouteMessage checks a route request and builds the router's message:
// a recorded decision without a request id gets a fresh one.
func RouteMessage(r Route) (*messages.RouteRequest, error) {
	if !r.HasTokens {
		return nil, errors.New(MsgTokensRequired)
	}
	if err := decide.CheckTokens(r.Tokens); err != nil {
		return nil, err
	}
	if r.RequestID != "" {
		if err := CheckRequestIDText(r.RequestID); err != nil {
			return nil, err
		}
	}
	update := r.UpdateStates == nil || *r.UpdateStates
	m := &messages.RouteRequest{
		RequestId: r.RequestID, TokenIds: r.Tokens, LoraName: r.LoraName, UpdateStates: update,
		AllowedWorkerIds: r.AllowedWorkerIDs, ExpectedOutputTokens: r.ExpectedOutputTokens,
		PriorityJump: r.PriorityJump, PinnedWorker: r.Pinned, RouterConfigOverride: r.Override, SessionId: r.SessionID,
		Model: r.Model, Explain: r.Explain,
	}
	if update && m.RequestId == "" {
		m.RequestId = NewRequestID()
	}
	if len(r.Model) > MaxModelBytes {
		return nil, errors.New(MsgModelTooLong)
	}
	if r.Override != nil {
		if err := ValidateOverride(r.Override); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// ValidateOverride checks router_config_override's ranges (NaN is out of
// every range).
func ValidateOverride(o *messages.RouterConfigOverride) error {
	check := func(name string, v *float64, lo, hi float64) error {
		if v != nil && (*v < lo || *v > hi || *v != *v) {
			return errors.New("router_config_override." + name + " is out of range")
		}
		return nil
	}
	return errors.Join(
		check("overlap_score_weight", o.OverlapScoreWeight, 0, 1e9),
		check("router_temperature", o.RouterTemperature, 0, 1e9),
		check("overlap_score_credit", o.OverlapScoreCredit, 0, 1),
		check("prefill_load_scale", o.PrefillLoadScale, 0, 1e9),
		check("shared_cache_multiplier", o.SharedCacheMultiplier, 0, 1e9),
	)
}

// CheckRequestID is the rule of prefill_done and free.
func CheckRequestID(id string) error {
	if id == "" {
		return errors.New(MsgRequestIDNeeded)
	}
	return CheckRequestIDText(id)
}

// CheckQueryTokens is the rule of overlap_scores and potential_loads.
func CheckQueryTokens(tokens []uint32) error {
	if len(tokens) == 0 {
		return errors.New(MsgQueryTokens)
	}
	return nil
}

// NewRequestID names a recorded decision whose client gave no id.
func NewRequestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never returns an error (it crashes the program instead)
	return "kvr-" + hex.EncodeToString(b[:])
}

// OverlapCredit is what one rank's overlap is worth to a decision, as
// the overlap-scores answers of both APIs report it: its effective cached
// blocks (device, host and disk at their weights) and tokens, and the
// prompt's shared-tier prefix beyond its device prefix with the credit
// the cost gives it.
type OverlapCredit struct {
	Credit                   float64
	CachedTokens             uint64
	SharedBeyondDeviceBlocks uint32
	SharedCreditBlocks       float64
}

// CreditOf is a rank's OverlapCredit under cfg.
func CreditOf(cfg scheduling.Config, blockSize int, device, host, disk, shared uint32) OverlapCredit {
	credit, cached := scheduling.CacheHitEstimate(cfg, blockSize, device, host, disk)
	return OverlapCredit{Credit: credit, CachedTokens: cached,
		SharedBeyondDeviceBlocks: scheduling.SharedBeyondDevice(device, shared),
		SharedCreditBlocks:       scheduling.SharedCredit(cfg.SharedCacheMultiplier, device, shared)}
}
