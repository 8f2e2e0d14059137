package docgen

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// RouterProto is the gRPC API's definition, relative to the repository's
// root.
const RouterProto = "messages/kvrouterv1/router.proto"

type protoFile struct {
	Doc      []string
	Package  string
	Services []*protoService
	Messages []*protoMessage
}

type protoService struct {
	Name string
	Doc  []string
	RPCs []protoRPC
}

type protoRPC struct {
	Name, Request, Response    string
	ClientStream, ServerStream bool
	Doc                        []string
}

type protoMessage struct {
	Name   string // qualified by its parents for nested messages: Outer.Inner
	Kind   string // "message" or "enum"
	Doc    []string
	Fields []protoField
}

type protoField struct {
	Label, Type, Name, Number, Oneof string
	Doc                              []string
}

var (
	reRPC    = regexp.MustCompile(`^rpc\s+(\w+)\s*\(\s*(stream\s+)?([\w.]+)\s*\)\s*returns\s*\(\s*(stream\s+)?([\w.]+)\s*\)\s*(;|\{\s*\})$`)
	reField  = regexp.MustCompile(`^(?:(repeated|optional)\s+)?(map\s*<\s*[\w.]+\s*,\s*[\w.]+\s*>|[\w.]+)\s+(\w+)\s*=\s*(\d+)\s*(?:\[[^\]]*\])?\s*;$`)
	reEnumV  = regexp.MustCompile(`^(\w+)\s*=\s*(-?\d+)\s*(?:\[[^\]]*\])?\s*;$`)
	reOpen   = regexp.MustCompile(`^(service|message|enum|oneof)\s+(\w+)\s*\{$`)
	reIgnore = regexp.MustCompile(`^(syntax|import|option|reserved)\b.*;$`)
)

// parseProto reads the subset of proto3 the router's API uses: services
// with unary and streaming rpcs, messages (nested too), enums, oneofs,
// map and repeated fields, leading and trailing // comments. Anything
// else is an error rather than something left out of the docs.
func parseProto(path string) (*protoFile, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	pf := &protoFile{}
	type frame struct {
		kind string
		svc  *protoService
		msg  *protoMessage
		name string // oneof name
	}
	var stack []frame
	var pending []string
	seenDecl := false
	sc := bufio.NewScanner(fh)
	for lineNo := 1; sc.Scan(); lineNo++ {
		line := strings.TrimSpace(sc.Text())
		errf := func(format string, args ...any) error {
			return fmt.Errorf("%s:%d: %s", path, lineNo, fmt.Sprintf(format, args...))
		}
		if strings.HasPrefix(line, "/*") {
			return nil, errf("block comments are not supported; use //")
		}
		if strings.HasPrefix(line, "//") {
			pending = append(pending, strings.TrimSpace(strings.TrimPrefix(line, "//")))
			continue
		}
		if line == "" {
			if !seenDecl && len(pending) > 0 && pf.Doc == nil {
				pf.Doc = pending
			}
			pending = nil
			continue
		}
		code, trailing, _ := strings.Cut(line, "//")
		code = strings.TrimSpace(code)
		doc := pending
		if t := strings.TrimSpace(trailing); t != "" {
			doc = append(doc, t)
		}
		pending = nil
		if !seenDecl && pf.Doc == nil && len(doc) > 0 {
			pf.Doc, doc = doc, nil
		}
		seenDecl = true
		var top *frame
		if len(stack) > 0 {
			top = &stack[len(stack)-1]
		}
		switch {
		case code == "}":
			if top == nil {
				return nil, errf("unbalanced }")
			}
			stack = stack[:len(stack)-1]
		case strings.HasPrefix(code, "package "):
			pf.Package = strings.TrimSuffix(strings.TrimSpace(strings.TrimPrefix(code, "package ")), ";")
		case reIgnore.MatchString(code):
		case reOpen.MatchString(code):
			m := reOpen.FindStringSubmatch(code)
			switch m[1] {
			case "service":
				s := &protoService{Name: m[2], Doc: doc}
				pf.Services = append(pf.Services, s)
				stack = append(stack, frame{kind: "service", svc: s})
			case "message", "enum":
				name := m[2]
				if top != nil && top.msg != nil {
					name = top.msg.Name + "." + name
				}
				msg := &protoMessage{Name: name, Kind: m[1], Doc: doc}
				pf.Messages = append(pf.Messages, msg)
				stack = append(stack, frame{kind: m[1], msg: msg})
			case "oneof":
				if top == nil || top.kind != "message" {
					return nil, errf("oneof outside a message")
				}
				stack = append(stack, frame{kind: "oneof", msg: top.msg, name: m[2]})
			}
		case top != nil && top.kind == "service":
			m := reRPC.FindStringSubmatch(code)
			if m == nil {
				return nil, errf("unrecognised line in service %s: %q", top.svc.Name, code)
			}
			top.svc.RPCs = append(top.svc.RPCs, protoRPC{Name: m[1], ClientStream: m[2] != "", Request: m[3],
				ServerStream: m[4] != "", Response: m[5], Doc: doc})
		case top != nil && top.kind == "enum":
			m := reEnumV.FindStringSubmatch(code)
			if m == nil {
				return nil, errf("unrecognised line in enum %s: %q", top.msg.Name, code)
			}
			top.msg.Fields = append(top.msg.Fields, protoField{Name: m[1], Number: m[2], Doc: doc})
		case top != nil && (top.kind == "message" || top.kind == "oneof"):
			m := reField.FindStringSubmatch(code)
			if m == nil {
				return nil, errf("unrecognised line in message %s: %q", top.msg.Name, code)
			}
			if top.kind == "oneof" && m[1] != "" {
				return nil, errf("a label on a oneof field")
			}
			f := protoField{Label: m[1], Type: strings.Join(strings.Fields(m[2]), " "), Name: m[3], Number: m[4], Doc: doc}
			if top.kind == "oneof" {
				f.Oneof = top.name
			}
			top.msg.Fields = append(top.msg.Fields, f)
		default:
			return nil, errf("unrecognised line: %q", code)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(stack) != 0 {
		return nil, fmt.Errorf("%s: unclosed %s", path, stack[len(stack)-1].kind)
	}
	return pf, nil
}

// GRPC renders docs/grpc-api.md from the comments of the router's proto.
func GRPC(root string) (string, error) {
	pf, err := parseProto(filepath.Join(root, RouterProto))
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "<!-- Generated by `make docs` (go run ./cmd/gendocs grpc) from %s; do not edit. -->\n", RouterProto)
	b.WriteString("# gRPC API reference\n\n")
	fmt.Fprintf(&b, "Package `%s`, defined in [`%s`](../%s).\n", pf.Package, RouterProto, RouterProto)
	b.WriteString("How to enable, authenticate and bound it: [reference.md](reference.md#grpc-api).\n\n")
	if len(pf.Doc) > 0 {
		b.WriteString(paragraph(pf.Doc) + "\n\n")
	}
	for _, s := range pf.Services {
		fmt.Fprintf(&b, "## Service `%s.%s`\n\n", pf.Package, s.Name)
		if len(s.Doc) > 0 {
			b.WriteString(paragraph(s.Doc) + "\n\n")
		}
		b.WriteString("| rpc | request | response | description |\n|---|---|---|---|\n")
		for _, r := range s.RPCs {
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", r.Name, typeRef(r.Request, r.ClientStream), typeRef(r.Response, r.ServerStream), escapeCell(paragraph(r.Doc)))
		}
		b.WriteString("\n")
	}
	b.WriteString("## Messages\n\n")
	for _, m := range pf.Messages {
		fmt.Fprintf(&b, "### %s\n\n", m.Name)
		if len(m.Doc) > 0 {
			b.WriteString(paragraph(m.Doc) + "\n\n")
		}
		if m.Kind == "enum" {
			b.WriteString("| value | number | description |\n|---|---|---|\n")
			for _, f := range m.Fields {
				fmt.Fprintf(&b, "| `%s` | %s | %s |\n", f.Name, f.Number, escapeCell(paragraph(f.Doc)))
			}
			b.WriteString("\n")
			continue
		}
		if len(m.Fields) == 0 {
			b.WriteString("No fields.\n\n")
			continue
		}
		b.WriteString("| # | field | type | description |\n|---|---|---|---|\n")
		for _, f := range m.Fields {
			typ := fieldType(f, pf)
			desc := paragraph(f.Doc)
			if f.Oneof != "" {
				desc = strings.TrimSpace(fmt.Sprintf("One of `%s`. %s", f.Oneof, desc))
			}
			fmt.Fprintf(&b, "| %s | `%s` | %s | %s |\n", f.Number, f.Name, typ, escapeCell(desc))
		}
		b.WriteString("\n")
	}
	return strings.TrimRight(b.String(), "\n") + "\n", nil
}

func fieldType(f protoField, pf *protoFile) string {
	t := "`" + f.Type + "`"
	if isLocal(f.Type, pf) {
		t = fmt.Sprintf("[%s](#%s)", f.Type, anchor(f.Type))
	}
	if f.Label != "" {
		t = f.Label + " " + t
	}
	return t
}

func typeRef(name string, stream bool) string {
	s := fmt.Sprintf("[%s](#%s)", name, anchor(name))
	if stream {
		s = "stream " + s
	}
	return s
}

func isLocal(name string, pf *protoFile) bool {
	for _, m := range pf.Messages {
		if m.Name == name {
			return true
		}
	}
	return false
}

// anchor is GitHub's heading anchor for a "### Name" heading.
func anchor(name string) string {
	return strings.ToLower(strings.ReplaceAll(name, ".", ""))
}

func paragraph(lines []string) string {
	return strings.TrimSpace(strings.Join(lines, " "))
}
