package config

import (
	"fmt"
	"io"
	"strings"
)

// WriteUsage prints `kvrouter serve -h`: the flags under their group
// headings, each with its type, default and environment variable.
func WriteUsage(w io.Writer) error {
	by, err := FlagsByGroup()
	if err != nil {
		return err
	}
	var b strings.Builder
	b.WriteString("usage: kvrouter serve [flags]\n\n" +
		"Every flag is also an environment variable (shown) and a key of the YAML file given by --config;\n" +
		"flags win over the environment, the environment over the file, the file over the defaults.\n" +
		"A list flag takes comma-separated values or is repeated. Reference: docs/configuration.md.\n")
	for _, g := range Groups {
		fmt.Fprintf(&b, "\n%s:\n", g.Title)
		for _, f := range by[g.Name] {
			head := "  --" + f.Name
			if f.Type != "bool" {
				head += " " + f.Type
			}
			b.WriteString(head + "\n")
			b.WriteString(wrap(f.Help, "        ", 100))
			meta := "env " + f.Env
			if f.Default != "" {
				meta = "default " + f.Default + "; " + meta
			}
			b.WriteString("        (" + meta + ")\n")
		}
	}
	_, err = io.WriteString(w, b.String())
	return err
}

// wrap breaks s into lines of at most width characters (a longer word
// stays whole), each starting with indent.
func wrap(s, indent string, width int) string {
	var b strings.Builder
	line := indent
	for _, word := range strings.Fields(s) {
		if len(line) > len(indent) && len(line)+1+len(word) > width {
			b.WriteString(line + "\n")
			line = indent
		}
		if len(line) > len(indent) {
			line += " "
		}
		line += word
	}
	if len(line) > len(indent) {
		b.WriteString(line + "\n")
	}
	return b.String()
}

// WriteMarkdown writes docs/configuration.md (`make docs`): one table per
// group of every flag's name, type, default, environment variable and help.
func WriteMarkdown(w io.Writer) error {
	by, err := FlagsByGroup()
	if err != nil {
		return err
	}
	var b strings.Builder
	b.WriteString("# Configuration reference\n\n" +
		"<!-- Generated from the flag definitions in config/config.go by `make docs`; do not edit. -->\n\n" +
		"`kvrouter serve` takes every setting below as a flag (`--block-size 32`), as an environment variable " +
		"(`KVROUTER_BLOCK_SIZE=32`) and as a key of the YAML file named by `--config` (`block-size: 32`). " +
		"Flags win over the environment, the environment over the file, the file over the defaults. " +
		"A key the router does not know, or a value of the wrong type, is an error naming the key and its line.\n\n" +
		"Types: `duration` is Go's form (`250ms`, `10s`, `1h30m`); a `list` is comma-separated or a repeated flag, " +
		"and in YAML a sequence or a comma-separated string; `bool` flags take `--flag` or `--flag=false`.\n\n" +
		"```yaml\n# kvrouter.yaml: kvrouter serve --config kvrouter.yaml\nhttp-addr: 0.0.0.0:8080\nblock-size: 16\n" +
		"served-model: [llama=/models/llama]\nstatic-workers:\n  - w1=http://10.0.0.11:8000\n  - w2=http://10.0.0.12:8000\n" +
		"log-format: json\n```\n\nThe password of `--nats-user` is read from `KVROUTER_NATS_PASSWORD` only (never a flag or file key).\n\n")
	for _, g := range Groups {
		fmt.Fprintf(&b, "- [%s](#%s)\n", g.Title, anchor(g.Title))
	}
	for _, g := range Groups {
		fmt.Fprintf(&b, "\n## %s\n\n%s\n\n| Flag | Type | Default | Environment | Description |\n|---|---|---|---|---|\n", g.Title, g.Intro)
		for _, f := range by[g.Name] {
			def := ""
			if f.Default != "" {
				def = "`" + f.Default + "`"
			}
			fmt.Fprintf(&b, "| `--%s` | %s | %s | `%s` | %s |\n", f.Name, f.Type, def, f.Env, cell(f.Help))
		}
	}
	_, err = io.WriteString(w, b.String())
	return err
}

// anchor is GitHub's heading anchor for the titles of Groups.
func anchor(title string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(title) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

// cell escapes text for a Markdown table cell.
func cell(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	s = strings.ReplaceAll(s, "<", "&lt;")
	return strings.ReplaceAll(s, ">", "&gt;")
}
