package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"strings"

	"go.yaml.in/yaml/v3"
)

// LoadFile sets the fields of *cfg named in the YAML file at path: a
// mapping whose keys are flag names. An unknown key, a key given twice or
// a value of the wrong type is an error naming the key and its line; a
// list takes a sequence or a comma-separated string.
func LoadFile(cfg *Config, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	if err := applyYAML(cfg, data); err != nil {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	return nil
}

func applyYAML(cfg *Config, data []byte) error {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // an empty file sets nothing
		}
		return err
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case err == nil:
		return fmt.Errorf("line %d: a second YAML document; the file must hold one mapping", extra.Line)
	case !errors.Is(err, io.EOF):
		return err
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return nil // only comments
	}
	if root.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: want a mapping of flag names to values", root.Line)
	}
	fields := map[string]int{}
	envOnly := map[string]bool{}
	t := reflect.TypeOf(*cfg)
	for i := 0; i < t.NumField(); i++ {
		if name := t.Field(i).Tag.Get("flag"); name != "" {
			fields[name] = i
		} else if name := t.Field(i).Tag.Get("env"); name != "" {
			envOnly[name] = true
		}
	}
	v := reflect.ValueOf(cfg).Elem()
	seen := map[string]int{}
	var errs []error
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, val := root.Content[i], root.Content[i+1]
		key := k.Value
		if k.Kind != yaml.ScalarNode {
			errs = append(errs, fmt.Errorf("line %d: a key must be a flag name", k.Line))
			continue
		}
		if line, dup := seen[key]; dup {
			errs = append(errs, fmt.Errorf("line %d: key %q given again (first on line %d)", k.Line, key, line))
			continue
		}
		seen[key] = k.Line
		idx, ok := fields[key]
		switch {
		case key == "config":
			errs = append(errs, fmt.Errorf("line %d: key %q: a config file cannot name another", k.Line, key))
			continue
		case envOnly[key]:
			errs = append(errs, fmt.Errorf("line %d: key %q is read from the environment only (%s)", k.Line, key, EnvName(key)))
			continue
		case !ok:
			errs = append(errs, fmt.Errorf("line %d: unknown key %q (keys are the flags of kvrouter serve -h)", k.Line, key))
			continue
		}
		if err := setFromNode(v.Field(idx), val); err != nil {
			errs = append(errs, fmt.Errorf("line %d: key %q: %w", val.Line, key, err))
		}
	}
	return errors.Join(errs...)
}

// setFromNode sets one field from its YAML value with the flag's own
// parser, so a value means the same in the file as on the command line.
func setFromNode(field reflect.Value, n *yaml.Node) error {
	want := typeName(field.Type())
	fv := &fieldValue{v: field}
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return fmt.Errorf("no value (want %s; delete the key for the default)", article(want))
	}
	if want == "list" {
		switch n.Kind {
		case yaml.SequenceNode:
			field.Set(reflect.ValueOf([]string{}))
			for _, item := range n.Content {
				if item.Kind != yaml.ScalarNode || item.Tag == "!!null" {
					return fmt.Errorf("line %d: want a list of strings", item.Line)
				}
				if err := fv.Set(item.Value); err != nil {
					return err
				}
			}
			return nil
		case yaml.ScalarNode:
			return fv.Set(n.Value)
		}
		return fmt.Errorf("want a list (a sequence or a comma-separated string), got a %s", kindName(n.Kind))
	}
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("want %s, got a %s", article(want), kindName(n.Kind))
	}
	// A YAML string where the flag wants a number or a bool is a type
	// error even if it would parse ("16" vs 16): the file says what it means.
	if n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0 && (want == "int" || want == "uint" || want == "float" || want == "bool") {
		return fmt.Errorf("want %s, got the string %q", article(want), n.Value)
	}
	if err := fv.Set(n.Value); err != nil {
		return fmt.Errorf("want %s: %w", article(want), err)
	}
	return nil
}

func kindName(k yaml.Kind) string {
	switch k {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "sequence"
	}
	return strings.ToLower(fmt.Sprint(k))
}

func article(typ string) string {
	if typ == "int" || typ == "uint" {
		return "an " + typ
	}
	return "a " + typ
}
