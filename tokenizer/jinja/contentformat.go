package jinja

import "strings"

// The engines pick the shape of message content ("string" or "openai"
// lists of typed parts) by reading the template's syntax tree, not by
// rendering it. These functions answer their two questions on this
// package's tree.

// IteratesMessageContent is vLLM's content-format detection
// (_detect_content_format in vllm/renderers/hf.py): true when some loop
// iterates message.content (or message['content'], through filters,
// tests and slices) where message is the target of a loop over messages
// or over a variable assigned from it. ok is false where vLLM's walk
// fails (a loop with several targets over messages) and falls back to
// its default, the string format.
func (t *Template) IteratesMessageContent() (openai, ok bool) {
	var sets []*setNode
	var fors []*forNode
	walk(t.body, func(n node) {
		switch n := n.(type) {
		case *setNode:
			if n.body == nil && n.obj == "" {
				sets = append(sets, n)
			}
		case *forNode:
			fors = append(fors, n)
		}
	})
	// Names that hold messages or a part of it, breadth first.
	msgNames := []string{"messages"}
	seen := map[string]bool{"messages": true}
	for q := 0; q < len(msgNames); q++ {
		for _, s := range sets {
			if !varOrElems(s.value, msgNames[q], "") {
				continue
			}
			if len(s.names) != 1 {
				return false, false
			}
			if !seen[s.names[0]] {
				seen[s.names[0]] = true
				msgNames = append(msgNames, s.names[0])
			}
		}
	}
	var messageVars []string
	for _, f := range fors {
		for _, name := range msgNames {
			if varOrElems(f.iter, name, "") {
				if len(f.vars) != 1 {
					return false, false
				}
				messageVars = append(messageVars, f.vars[0])
				break
			}
		}
	}
	for _, f := range fors {
		for _, name := range messageVars {
			if varOrElems(f.iter, name, "content") {
				if len(f.vars) != 1 {
					return false, false
				}
				return true, true
			}
		}
	}
	return false, true
}

// IteratesContentOf is SGLang's detection
// (detect_jinja_template_content_format): a template that mentions
// image, audio, video or vision anywhere, or loops over X.content for a
// variable X named message, msg or m.
func (t *Template) IteratesContentOf(src string) bool {
	for _, w := range []string{"image", "audio", "video", "vision"} {
		if strings.Contains(src, w) {
			return true
		}
	}
	found := false
	walk(t.body, func(n node) {
		if f, ok := n.(*forNode); ok {
			for _, v := range []string{"message", "msg", "m"} {
				if varOrElems(f.iter, v, "content") {
					found = true
				}
			}
		}
	})
	return found
}

// varOrElems reports whether e reads name (key == "") or name.key /
// name['key'], seen through filters, tests and slices.
func varOrElems(e expr, name, key string) bool {
	switch x := e.(type) {
	case *filterExpr:
		return x.e != nil && varOrElems(x.e, name, key)
	case *testExpr:
		return varOrElems(x.e, name, key)
	case *sliceExpr:
		return varOrElems(x.obj, name, key)
	}
	if key == "" {
		n, ok := e.(*nameExpr)
		return ok && n.name == name
	}
	switch x := e.(type) {
	case *indexExpr:
		n, ok := x.obj.(*nameExpr)
		k, isLit := x.key.(*literal)
		return ok && n.name == name && isLit && k.v == key
	case *attrExpr:
		n, ok := x.obj.(*nameExpr)
		return ok && n.name == name && x.name == key
	}
	return false
}

// walk calls fn on every statement node, nested bodies included.
func walk(nodes []node, fn func(node)) {
	for _, n := range nodes {
		fn(n)
		switch n := n.(type) {
		case *ifNode:
			for _, b := range n.bodies {
				walk(b, fn)
			}
			walk(n.els, fn)
		case *forNode:
			walk(n.body, fn)
			walk(n.els, fn)
		case *setNode:
			walk(n.body, fn)
		case *macroNode:
			walk(n.body, fn)
		case *callBlockNode:
			walk(n.body, fn)
		case *filterBlockNode:
			walk(n.body, fn)
		}
	}
}
