package decide

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"

	"go.yaml.in/yaml/v3"
)

// Policy is a policy file: the pipeline of every served model without
// one of its own (Default) and the pipelines of named models.
type Policy struct {
	Default Spec
	Models  map[string]Spec
}

// Pipelines builds every pipeline the policy names.
func (p Policy) Pipelines() (def Pipeline, models map[string]Pipeline, err error) {
	if def, err = Build(p.Default); err != nil {
		return def, nil, fmt.Errorf("default: %w", err)
	}
	models = make(map[string]Pipeline, len(p.Models))
	for name, s := range p.Models {
		pipe, err := Build(s)
		if err != nil {
			return def, nil, fmt.Errorf("model %q: %w", name, err)
		}
		models[name] = pipe
	}
	return def, models, nil
}

// ParsePolicy reads a policy file:
//
//	default:                      # optional: today's default pipeline
//	  admitter: queue-threshold
//	  filters: [session-affinity]
//	  scorers:
//	    - {plugin: cost, weight: 1}
//	  picker: temperature
//	models:                       # optional: per served model
//	  llama-lora:
//	    scorers:
//	      - {plugin: cost, weight: 1}
//	      - {plugin: lora-affinity, weight: 0.5}
//
// A stage a pipeline leaves out is the default pipeline's. Unknown keys,
// unknown plugins, keys given twice, weights that are not finite
// non-negative numbers, and a pipeline whose weights are all zero are
// errors naming the line.
func ParsePolicy(data []byte) (Policy, error) {
	pol := Policy{Default: DefaultSpec()}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return pol, nil
		}
		return pol, err
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case err == nil:
		return pol, fmt.Errorf("line %d: a second YAML document; a policy file holds one mapping", extra.Line)
	case !errors.Is(err, io.EOF):
		return pol, err
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return pol, nil
	}
	err := eachKey(root, "a mapping with the keys default and models", func(k, v *yaml.Node) error {
		switch k.Value {
		case "default":
			s, err := parseSpec(v, DefaultSpec())
			if err != nil {
				return err
			}
			pol.Default = s
			return nil
		case "models":
			return eachKey(v, "a mapping of served model names to pipelines", func(mk, mv *yaml.Node) error {
				if pol.Models == nil {
					pol.Models = map[string]Spec{}
				}
				s, err := parseSpec(mv, pol.Default)
				if err != nil {
					return fmt.Errorf("model %q: %w", mk.Value, err)
				}
				pol.Models[mk.Value] = s
				return nil
			})
		}
		return fmt.Errorf("line %d: unknown key %q (want default or models)", k.Line, k.Value)
	})
	return pol, err
}

// parseSpec reads one pipeline; stages it does not name are base's.
// Every name is checked here, so an error carries its line.
func parseSpec(n *yaml.Node, base Spec) (Spec, error) {
	s := base
	s.Filters = append([]string(nil), base.Filters...)
	s.Scorers = append([]WeightedName(nil), base.Scorers...)
	err := eachKey(n, "a pipeline (admitter, filters, scorers, picker)", func(k, v *yaml.Node) error {
		switch k.Value {
		case "admitter":
			name, err := pluginName(v, admitters)
			s.Admitter = name
			return err
		case "picker":
			name, err := pluginName(v, pickers)
			s.Picker = name
			return err
		case "filters":
			if v.Kind != yaml.SequenceNode {
				return fmt.Errorf("line %d: filters: want a list of filter names", v.Line)
			}
			s.Filters = s.Filters[:0]
			for _, item := range v.Content {
				name, err := pluginName(item, filters)
				if err != nil {
					return err
				}
				s.Filters = append(s.Filters, name)
			}
			return nil
		case "scorers":
			if v.Kind != yaml.SequenceNode {
				return fmt.Errorf("line %d: scorers: want a list of {plugin, weight}", v.Line)
			}
			s.Scorers = s.Scorers[:0]
			total := 0.0
			for _, item := range v.Content {
				w, err := parseScorer(item)
				if err != nil {
					return err
				}
				total += w.Weight
				s.Scorers = append(s.Scorers, w)
			}
			if total == 0 {
				return fmt.Errorf("line %d: scorers: a pipeline needs a scorer with a positive weight", v.Line)
			}
			return nil
		}
		return fmt.Errorf("line %d: unknown key %q (want admitter, filters, scorers or picker)", k.Line, k.Value)
	})
	return s, err
}

func parseScorer(n *yaml.Node) (WeightedName, error) {
	w := WeightedName{Weight: 1}
	named := false
	err := eachKey(n, "a scorer {plugin: NAME, weight: W}", func(k, v *yaml.Node) error {
		switch k.Value {
		case "plugin":
			name, err := pluginName(v, scorers)
			w.Name, named = name, true
			return err
		case "weight":
			if v.Kind != yaml.ScalarNode || (v.Tag != "!!int" && v.Tag != "!!float") {
				return fmt.Errorf("line %d: weight: want a number", v.Line)
			}
			f, err := strconv.ParseFloat(v.Value, 64)
			if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f < 0 || f > maxWeight {
				return fmt.Errorf("line %d: weight %s: want a number in [0, %g]", v.Line, v.Value, float64(maxWeight))
			}
			w.Weight = f
			return nil
		}
		return fmt.Errorf("line %d: unknown key %q (want plugin or weight)", k.Line, k.Value)
	})
	if err == nil && !named {
		err = fmt.Errorf("line %d: a scorer needs a plugin name", n.Line)
	}
	return w, err
}

// maxWeight bounds a scorer's weight (Build checks the same bound).
const maxWeight = 1e9

func pluginName[T Plugin](n *yaml.Node, known map[string]T) (string, error) {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
		return "", fmt.Errorf("line %d: want a plugin name", n.Line)
	}
	if _, ok := known[n.Value]; !ok {
		return "", fmt.Errorf("line %d: unknown plugin %q (want one of %v)", n.Line, n.Value, names(known))
	}
	return n.Value, nil
}

// eachKey calls f for each key of mapping n, refusing other node kinds
// and keys given twice.
func eachKey(n *yaml.Node, want string, f func(k, v *yaml.Node) error) error {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: want %s", n.Line, want)
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return fmt.Errorf("line %d: want %s", k.Line, want)
		}
		if line, dup := seen[k.Value]; dup {
			return fmt.Errorf("line %d: key %q given again (first on line %d)", k.Line, k.Value, line)
		}
		seen[k.Value] = k.Line
		if v.Kind == yaml.AliasNode {
			v = v.Alias
		}
		if err := f(k, v); err != nil {
			return err
		}
	}
	return nil
}
