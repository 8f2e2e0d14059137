package config

import (
	"fmt"
	"github.com/kvrouter/kvrouter/parity"
	"strings"

	"github.com/kvrouter/kvrouter/tokenizer"
)

// validateModels checks the served-model flags' shapes (the tokenizer
// files are read when the replica starts).
func (c *Config) validateModels() []error {
	var errs []error
	switch c.TokenizerMode {
	case "router", "engine":
	default:
		errs = append(errs, fmt.Errorf("tokenizer-mode must be router or engine, got %q", c.TokenizerMode))
	}
	for _, s := range c.ServedModels {
		name, path, hasPath := strings.Cut(s, "=")
		if strings.TrimSpace(name) == "" {
			errs = append(errs, fmt.Errorf("served-model %q: want NAME=PATH", s))
		}
		if !hasPath && c.Tokenizer == "" && c.TokenizerMode != "engine" {
			errs = append(errs, fmt.Errorf("served-model %q has no tokenizer path: give NAME=PATH or --tokenizer", s))
		}
		if hasPath && strings.TrimSpace(path) == "" {
			errs = append(errs, fmt.Errorf("served-model %q: empty tokenizer path", s))
		}
	}
	for _, s := range c.ChatEngines {
		name, engine, ok := strings.Cut(s, "=")
		if !ok || strings.TrimSpace(name) == "" {
			errs = append(errs, fmt.Errorf("chat-engine %q: want MODEL=vllm or MODEL=sglang", s))
			continue
		}
		if _, err := tokenizer.ParseDialect(engine); err != nil {
			errs = append(errs, fmt.Errorf("chat-engine %q: %w", s, err))
		}
	}
	for _, s := range c.ServedLoRAs {
		if a, b, ok := strings.Cut(s, "="); !ok || strings.TrimSpace(a) == "" || strings.TrimSpace(b) == "" {
			errs = append(errs, fmt.Errorf("served-lora %q: want ADAPTER=MODEL", s))
		}
	}
	return errs
}

// ParityConfig is the live cache-parity tracker's configuration.
func (c *Config) ParityConfig() parity.Config {
	p := parity.DefaultConfig()
	p.Window, p.MinSamples, p.MismatchThreshold = c.ParityWindow, c.ParityMinSamples, c.ParityMismatchThreshold
	p.CleanWindow, p.AutoSwitch = c.ParityCleanWindow, c.ParityAutoSwitch
	return p
}
