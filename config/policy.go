package config

import (
	"fmt"
	"io"
	"os"

	"github.com/kvrouter/kvrouter/decide"
)

// maxPolicyFileBytes bounds --policy-file (a policy is a few lines per
// served model).
const maxPolicyFileBytes = 1 << 20

// policyPipelines are the pipelines a policy file composes.
type policyPipelines struct {
	def    decide.Pipeline
	models map[string]decide.Pipeline
}

// loadPolicy reads, checks and builds --policy-file (none: nothing to
// do, the routing flags configure decide.DefaultPipeline). Validate calls
// it, so a bad file stops the start-up with its line named; Actors hands
// the pipelines to the Decider.
func (c *Config) loadPolicy() error {
	c.policy = nil
	if c.PolicyFile == "" {
		return nil
	}
	p, err := readPolicy(c.PolicyFile)
	if err != nil {
		return err
	}
	c.policy = p
	return nil
}

// readPolicy reads and builds the policy file at path.
func readPolicy(path string) (*policyPipelines, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("policy-file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxPolicyFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("policy-file: %w", err)
	}
	if len(data) > maxPolicyFileBytes {
		return nil, fmt.Errorf("policy-file %s: longer than %d bytes", path, maxPolicyFileBytes)
	}
	pol, err := decide.ParsePolicy(data)
	if err != nil {
		return nil, fmt.Errorf("policy-file %s: %w", path, err)
	}
	def, models, err := pol.Pipelines()
	if err != nil {
		return nil, fmt.Errorf("policy-file %s: %w", path, err)
	}
	return &policyPipelines{def: def, models: models}, nil
}
