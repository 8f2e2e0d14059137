package jinja

import (
	"fmt"
	"strconv"
)

// ---- AST ----

type node interface{}

type (
	textNode   struct{ s string }
	outputNode struct{ e expr }
	ifNode     struct {
		conds  []expr
		bodies [][]node
		els    []node
	}
	forNode struct {
		vars []string
		iter expr
		cond expr
		body []node
		els  []node
	}
	setNode struct {
		names []string // one name, or several to unpack
		obj   string   // set obj.attr = value
		attr  string
		value expr
		body  []node // {% set x %}...{% endset %}
	}
	macroNode struct {
		name   string
		params []param
		body   []node
	}
	callBlockNode struct {
		call expr
		body []node
	}
	filterBlockNode struct {
		filter *filterExpr
		body   []node
	}
	breakNode    struct{}
	continueNode struct{}
)

type param struct {
	name string
	def  expr // nil: required
}

type expr interface{}

type (
	literal  struct{ v any }
	nameExpr struct{ name string }
	attrExpr struct {
		obj  expr
		name string
	}
	indexExpr struct{ obj, key expr }
	sliceExpr struct{ obj, lo, hi, step expr }
	callExpr  struct {
		fn     expr
		args   []expr
		kwargs []kwarg
	}
	filterExpr struct {
		e      expr
		name   string
		args   []expr
		kwargs []kwarg
	}
	testExpr struct {
		e      expr
		name   string
		args   []expr
		negate bool
	}
	unaryExpr struct {
		op string
		e  expr
	}
	binaryExpr struct {
		op   string
		l, r expr
	}
	condExpr struct{ then, cond, els expr }
	listExpr struct{ items []expr }
	dictExpr struct{ keys, vals []expr }
)

type kwarg struct {
	name string
	e    expr
}

// ---- parser ----

type parser struct {
	toks []token
	pos  int
}

func parse(toks []token) ([]node, error) {
	p := &parser{toks: toks}
	body, end, err := p.block()
	if err != nil {
		return nil, err
	}
	if end != "" {
		return nil, p.errAt(p.pos, "unexpected {%% %s %%}", end)
	}
	return body, nil
}

func (p *parser) peek() token { return p.toks[p.pos] }
func (p *parser) next() token {
	t := p.toks[p.pos]
	if t.kind != tEOF {
		p.pos++
	}
	return t
}

func (p *parser) errAt(pos int, format string, args ...any) error {
	if pos >= len(p.toks) {
		pos = len(p.toks) - 1
	}
	return &SyntaxError{Line: p.toks[pos].line, Msg: fmt.Sprintf(format, args...)}
}

func (p *parser) isOp(v string) bool {
	t := p.peek()
	return t.kind == tOp && t.val == v
}

func (p *parser) isName(v string) bool {
	t := p.peek()
	return t.kind == tName && t.val == v
}

func (p *parser) expectOp(v string) error {
	if !p.isOp(v) {
		return p.errAt(p.pos, "expected %q, found %q", v, p.peek().val)
	}
	p.next()
	return nil
}

func (p *parser) expectName() (string, error) {
	t := p.peek()
	if t.kind != tName {
		return "", p.errAt(p.pos, "expected a name, found %q", t.val)
	}
	p.next()
	return t.val, nil
}

func (p *parser) expectKind(k tokKind, what string) error {
	if p.peek().kind != k {
		return p.errAt(p.pos, "expected %s, found %q", what, p.peek().val)
	}
	p.next()
	return nil
}

// block parses nodes until an end tag it does not own: it returns that
// tag's name (the {% and name are consumed, the rest is not) or "" at EOF.
func (p *parser) block() ([]node, string, error) {
	var out []node
	for {
		t := p.next()
		switch t.kind {
		case tEOF:
			return out, "", nil
		case tText:
			out = append(out, &textNode{t.val})
		case tOpenExpr:
			e, err := p.expression()
			if err != nil {
				return nil, "", err
			}
			if err := p.expectKind(tCloseExpr, "}}"); err != nil {
				return nil, "", err
			}
			out = append(out, &outputNode{e})
		case tOpenStmt:
			name, err := p.expectName()
			if err != nil {
				return nil, "", err
			}
			n, err := p.statement(name)
			if err != nil {
				return nil, "", err
			}
			if n == nil { // an end/intermediate tag for the caller
				return out, name, nil
			}
			out = append(out, n)
		default:
			return nil, "", p.errAt(p.pos-1, "unexpected %q", t.val)
		}
	}
}

func (p *parser) closeStmt() error { return p.expectKind(tCloseStmt, "%}") }

func (p *parser) statement(name string) (node, error) {
	switch name {
	case "if":
		return p.ifStmt()
	case "for":
		return p.forStmt()
	case "set":
		return p.setStmt()
	case "macro":
		return p.macroStmt()
	case "call":
		return p.callStmt()
	case "filter":
		return p.filterStmt()
	case "break", "continue":
		if err := p.closeStmt(); err != nil {
			return nil, err
		}
		if name == "break" {
			return &breakNode{}, nil
		}
		return &continueNode{}, nil
	case "elif", "else", "endif", "endfor", "endset", "endmacro", "endcall", "endfilter":
		return nil, nil
	}
	return nil, p.errAt(p.pos-1, "unknown tag %q", name)
}

func (p *parser) ifStmt() (node, error) {
	n := &ifNode{}
	cond, err := p.expression()
	if err != nil {
		return nil, err
	}
	if err := p.closeStmt(); err != nil {
		return nil, err
	}
	for {
		body, end, err := p.block()
		if err != nil {
			return nil, err
		}
		n.conds = append(n.conds, cond)
		n.bodies = append(n.bodies, body)
		switch end {
		case "elif":
			if cond, err = p.expression(); err != nil {
				return nil, err
			}
			if err := p.closeStmt(); err != nil {
				return nil, err
			}
		case "else":
			if err := p.closeStmt(); err != nil {
				return nil, err
			}
			els, end, err := p.block()
			if err != nil {
				return nil, err
			}
			if end != "endif" {
				return nil, p.errAt(p.pos, "expected endif, found %q", end)
			}
			n.els = els
			return n, p.closeStmt()
		case "endif":
			return n, p.closeStmt()
		default:
			return nil, p.errAt(p.pos, "if: expected elif, else or endif, found %q", end)
		}
	}
}

func (p *parser) forStmt() (node, error) {
	n := &forNode{}
	paren := p.isOp("(")
	if paren {
		p.next()
	}
	for {
		v, err := p.expectName()
		if err != nil {
			return nil, err
		}
		n.vars = append(n.vars, v)
		if !p.isOp(",") {
			break
		}
		p.next()
	}
	if paren {
		if err := p.expectOp(")"); err != nil {
			return nil, err
		}
	}
	if !p.isName("in") {
		return nil, p.errAt(p.pos, "for: expected 'in'")
	}
	p.next()
	var err error
	if n.iter, err = p.ternary(false); err != nil {
		return nil, err
	}
	if p.isName("if") {
		p.next()
		if n.cond, err = p.expression(); err != nil {
			return nil, err
		}
	}
	if err := p.closeStmt(); err != nil {
		return nil, err
	}
	body, end, err := p.block()
	if err != nil {
		return nil, err
	}
	n.body = body
	if end == "else" {
		if err := p.closeStmt(); err != nil {
			return nil, err
		}
		if n.els, end, err = p.block(); err != nil {
			return nil, err
		}
	}
	if end != "endfor" {
		return nil, p.errAt(p.pos, "for: expected endfor, found %q", end)
	}
	return n, p.closeStmt()
}

func (p *parser) setStmt() (node, error) {
	n := &setNode{}
	first, err := p.expectName()
	if err != nil {
		return nil, err
	}
	if p.isOp(".") {
		p.next()
		if n.attr, err = p.expectName(); err != nil {
			return nil, err
		}
		n.obj = first
	} else {
		n.names = []string{first}
		for p.isOp(",") {
			p.next()
			v, err := p.expectName()
			if err != nil {
				return nil, err
			}
			n.names = append(n.names, v)
		}
	}
	if p.isOp("=") {
		p.next()
		if n.value, err = p.expression(); err != nil {
			return nil, err
		}
		return n, p.closeStmt()
	}
	if err := p.closeStmt(); err != nil {
		return nil, err
	}
	body, end, err := p.block()
	if err != nil {
		return nil, err
	}
	if end != "endset" {
		return nil, p.errAt(p.pos, "set: expected endset, found %q", end)
	}
	n.body = body
	return n, p.closeStmt()
}

func (p *parser) params() ([]param, error) {
	var out []param
	if err := p.expectOp("("); err != nil {
		return nil, err
	}
	for !p.isOp(")") {
		name, err := p.expectName()
		if err != nil {
			return nil, err
		}
		pr := param{name: name}
		if p.isOp("=") {
			p.next()
			if pr.def, err = p.expression(); err != nil {
				return nil, err
			}
		}
		out = append(out, pr)
		if !p.isOp(",") {
			break
		}
		p.next()
	}
	return out, p.expectOp(")")
}

func (p *parser) macroStmt() (node, error) {
	name, err := p.expectName()
	if err != nil {
		return nil, err
	}
	params, err := p.params()
	if err != nil {
		return nil, err
	}
	if err := p.closeStmt(); err != nil {
		return nil, err
	}
	body, end, err := p.block()
	if err != nil {
		return nil, err
	}
	if end != "endmacro" {
		return nil, p.errAt(p.pos, "macro: expected endmacro, found %q", end)
	}
	return &macroNode{name: name, params: params, body: body}, p.closeStmt()
}

func (p *parser) callStmt() (node, error) {
	if p.isOp("(") { // {% call(args) macro() %}: caller arguments are not supported
		return nil, p.errAt(p.pos, "call blocks with caller arguments are not supported")
	}
	e, err := p.expression()
	if err != nil {
		return nil, err
	}
	if err := p.closeStmt(); err != nil {
		return nil, err
	}
	body, end, err := p.block()
	if err != nil {
		return nil, err
	}
	if end != "endcall" {
		return nil, p.errAt(p.pos, "call: expected endcall, found %q", end)
	}
	return &callBlockNode{call: e, body: body}, p.closeStmt()
}

func (p *parser) filterStmt() (node, error) {
	f := &filterExpr{}
	var err error
	if f.name, err = p.expectName(); err != nil {
		return nil, err
	}
	if p.isOp("(") {
		if f.args, f.kwargs, err = p.callArgs(); err != nil {
			return nil, err
		}
	}
	if err := p.closeStmt(); err != nil {
		return nil, err
	}
	body, end, err := p.block()
	if err != nil {
		return nil, err
	}
	if end != "endfilter" {
		return nil, p.errAt(p.pos, "filter: expected endfilter, found %q", end)
	}
	return &filterBlockNode{filter: f, body: body}, p.closeStmt()
}

// ---- expressions (Jinja2's precedence) ----

func (p *parser) expression() (expr, error) { return p.ternary(true) }

// ternary parses `a if cond else b` (withCond false: a for loop's
// iterable, whose `if` filters items).
func (p *parser) ternary(withCond bool) (expr, error) {
	e, err := p.or()
	if err != nil {
		return nil, err
	}
	for withCond && p.isName("if") {
		p.next()
		cond, err := p.or()
		if err != nil {
			return nil, err
		}
		var els expr
		if p.isName("else") {
			p.next()
			if els, err = p.ternary(true); err != nil {
				return nil, err
			}
		}
		e = &condExpr{then: e, cond: cond, els: els}
	}
	return e, nil
}

func (p *parser) or() (expr, error) {
	l, err := p.and()
	for err == nil && p.isName("or") {
		p.next()
		var r expr
		r, err = p.and()
		l = &binaryExpr{op: "or", l: l, r: r}
	}
	return l, err
}

func (p *parser) and() (expr, error) {
	l, err := p.not()
	for err == nil && p.isName("and") {
		p.next()
		var r expr
		r, err = p.not()
		l = &binaryExpr{op: "and", l: l, r: r}
	}
	return l, err
}

func (p *parser) not() (expr, error) {
	if p.isName("not") {
		p.next()
		e, err := p.not()
		return &unaryExpr{op: "not", e: e}, err
	}
	return p.compare()
}

func (p *parser) compare() (expr, error) {
	l, err := p.math1()
	if err != nil {
		return nil, err
	}
	for {
		t := p.peek()
		var op string
		switch {
		case t.kind == tOp && (t.val == "==" || t.val == "!=" || t.val == "<" || t.val == ">" || t.val == "<=" || t.val == ">="):
			op = t.val
			p.next()
		case t.kind == tName && t.val == "in":
			op = "in"
			p.next()
		case t.kind == tName && t.val == "not" && p.toks[p.pos+1].kind == tName && p.toks[p.pos+1].val == "in":
			op = "not in"
			p.pos += 2
		default:
			return l, nil
		}
		r, err := p.math1()
		if err != nil {
			return nil, err
		}
		l = &binaryExpr{op: op, l: l, r: r}
	}
}

func (p *parser) math1() (expr, error) {
	l, err := p.concat()
	for err == nil && (p.isOp("+") || p.isOp("-")) {
		op := p.next().val
		var r expr
		r, err = p.concat()
		l = &binaryExpr{op: op, l: l, r: r}
	}
	return l, err
}

func (p *parser) concat() (expr, error) {
	l, err := p.math2()
	for err == nil && p.isOp("~") {
		p.next()
		var r expr
		r, err = p.math2()
		l = &binaryExpr{op: "~", l: l, r: r}
	}
	return l, err
}

func (p *parser) math2() (expr, error) {
	l, err := p.pow()
	for err == nil && (p.isOp("*") || p.isOp("/") || p.isOp("//") || p.isOp("%")) {
		op := p.next().val
		var r expr
		r, err = p.pow()
		l = &binaryExpr{op: op, l: l, r: r}
	}
	return l, err
}

func (p *parser) pow() (expr, error) {
	l, err := p.unary()
	for err == nil && p.isOp("**") {
		p.next()
		var r expr
		r, err = p.unary()
		l = &binaryExpr{op: "**", l: l, r: r}
	}
	return l, err
}

func (p *parser) unary() (expr, error) {
	if p.isOp("-") || p.isOp("+") {
		op := p.next().val
		e, err := p.unary()
		if err != nil {
			return nil, err
		}
		return p.filters(&unaryExpr{op: op, e: e})
	}
	e, err := p.primary()
	if err != nil {
		return nil, err
	}
	if e, err = p.postfix(e); err != nil {
		return nil, err
	}
	return p.filters(e)
}

// filters parses `| filter(...)` and `is [not] test(...)` after an
// operand (they bind tighter than any operator).
func (p *parser) filters(e expr) (expr, error) {
	for {
		switch {
		case p.isOp("|"):
			p.next()
			f := &filterExpr{e: e}
			var err error
			if f.name, err = p.expectName(); err != nil {
				return nil, err
			}
			if p.isOp("(") {
				if f.args, f.kwargs, err = p.callArgs(); err != nil {
					return nil, err
				}
			}
			e = f
		case p.isName("is"):
			p.next()
			t := &testExpr{e: e}
			if p.isName("not") {
				p.next()
				t.negate = true
			}
			name := p.peek()
			switch {
			case name.kind == tName:
				t.name = name.val
			case name.kind == tOp && (name.val == "==" || name.val == "!=" || name.val == "<" || name.val == ">" || name.val == "<=" || name.val == ">="):
				t.name = name.val
			default:
				return nil, p.errAt(p.pos, "expected a test name after 'is'")
			}
			p.next()
			if p.isOp("(") {
				args, _, err := p.callArgs()
				if err != nil {
					return nil, err
				}
				t.args = args
			} else if k := p.peek().kind; k == tString || k == tNumber || (k == tName && !isKeyword(p.peek().val)) {
				// `is divisibleby 3`, `is sameas none`
				a, err := p.primary()
				if err != nil {
					return nil, err
				}
				t.args = []expr{a}
			}
			e = t
		default:
			return e, nil
		}
	}
}

func isKeyword(s string) bool {
	switch s {
	case "and", "or", "not", "in", "is", "if", "else":
		return true
	}
	return false
}

func (p *parser) postfix(e expr) (expr, error) {
	for {
		switch {
		case p.isOp("."):
			p.next()
			t := p.next()
			if t.kind != tName && t.kind != tNumber {
				return nil, p.errAt(p.pos-1, "expected an attribute name after '.'")
			}
			if t.kind == tNumber {
				n, _ := strconv.ParseInt(t.val, 10, 64)
				e = &indexExpr{obj: e, key: &literal{n}}
			} else {
				e = &attrExpr{obj: e, name: t.val}
			}
		case p.isOp("["):
			p.next()
			var parts [3]expr
			nparts, colons := 0, 0
			for {
				if p.isOp("]") {
					break
				}
				if p.isOp(":") {
					p.next()
					colons++
					if colons > 2 {
						return nil, p.errAt(p.pos, "too many ':' in a slice")
					}
					nparts = colons
					continue
				}
				x, err := p.expression()
				if err != nil {
					return nil, err
				}
				parts[colons] = x
				nparts = colons
			}
			if err := p.expectOp("]"); err != nil {
				return nil, err
			}
			if colons == 0 {
				if parts[0] == nil {
					return nil, p.errAt(p.pos, "empty subscript")
				}
				e = &indexExpr{obj: e, key: parts[0]}
			} else {
				_ = nparts
				e = &sliceExpr{obj: e, lo: parts[0], hi: parts[1], step: parts[2]}
			}
		case p.isOp("("):
			args, kwargs, err := p.callArgs()
			if err != nil {
				return nil, err
			}
			e = &callExpr{fn: e, args: args, kwargs: kwargs}
		default:
			return e, nil
		}
	}
}

func (p *parser) callArgs() ([]expr, []kwarg, error) {
	if err := p.expectOp("("); err != nil {
		return nil, nil, err
	}
	var args []expr
	var kwargs []kwarg
	for !p.isOp(")") {
		if p.peek().kind == tName && p.toks[p.pos+1].kind == tOp && p.toks[p.pos+1].val == "=" {
			name := p.next().val
			p.next()
			e, err := p.expression()
			if err != nil {
				return nil, nil, err
			}
			kwargs = append(kwargs, kwarg{name, e})
		} else {
			e, err := p.expression()
			if err != nil {
				return nil, nil, err
			}
			args = append(args, e)
		}
		if !p.isOp(",") {
			break
		}
		p.next()
	}
	return args, kwargs, p.expectOp(")")
}

func (p *parser) primary() (expr, error) {
	t := p.next()
	switch t.kind {
	case tString:
		s := t.val
		for p.peek().kind == tString { // adjacent literals concatenate
			s += p.next().val
		}
		return &literal{s}, nil
	case tNumber:
		if i, err := strconv.ParseInt(t.val, 10, 64); err == nil {
			return &literal{i}, nil
		}
		f, err := strconv.ParseFloat(t.val, 64)
		if err != nil {
			return nil, p.errAt(p.pos-1, "bad number %q", t.val)
		}
		return &literal{f}, nil
	case tName:
		switch t.val {
		case "true", "True":
			return &literal{true}, nil
		case "false", "False":
			return &literal{false}, nil
		case "none", "None":
			return &literal{nil}, nil
		}
		return &nameExpr{t.val}, nil
	case tOp:
		switch t.val {
		case "(":
			if p.isOp(")") {
				p.next()
				return &listExpr{}, nil
			}
			e, err := p.expression()
			if err != nil {
				return nil, err
			}
			if p.isOp(",") { // a tuple
				items := []expr{e}
				for p.isOp(",") {
					p.next()
					if p.isOp(")") {
						break
					}
					x, err := p.expression()
					if err != nil {
						return nil, err
					}
					items = append(items, x)
				}
				e = &listExpr{items: items}
			}
			return e, p.expectOp(")")
		case "[":
			l := &listExpr{}
			for !p.isOp("]") {
				x, err := p.expression()
				if err != nil {
					return nil, err
				}
				l.items = append(l.items, x)
				if !p.isOp(",") {
					break
				}
				p.next()
			}
			return l, p.expectOp("]")
		case "{":
			d := &dictExpr{}
			for !p.isOp("}") {
				k, err := p.expression()
				if err != nil {
					return nil, err
				}
				if err := p.expectOp(":"); err != nil {
					return nil, err
				}
				v, err := p.expression()
				if err != nil {
					return nil, err
				}
				d.keys, d.vals = append(d.keys, k), append(d.vals, v)
				if !p.isOp(",") {
					break
				}
				p.next()
			}
			return d, p.expectOp("}")
		}
	}
	return nil, p.errAt(p.pos-1, "unexpected %q in an expression", t.val)
}
