// Package docs keeps the documentation honest: docs/configuration.md lists
// every Caddyfile keyword that a comfygate module's parser accepts (the
// keywords are read from the parsers' source, not from a list kept by
// hand), and every relative link in README.md and docs/ leads somewhere.
package docs

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Keyword is a Caddyfile word that a comfygate module's parser accepts.
type Keyword struct {
	Word string
	// Where is the first place it was found, file:line.
	Where string
}

// Module is what a Caddy module package accepts in a Caddyfile.
type Module struct {
	// Dir is the package's directory.
	Dir string
	// Names are what the module is called in a Caddyfile: the directive or
	// global option it registers, or the last label of its module ID
	// (permission comfy_deployment).
	Names []string
	// Keywords are every word its parsers accept, Names included.
	Keywords []Keyword
}

// keywordShape is what a Caddyfile keyword looks like: directive, option
// and mode names are lowercase words with underscores.
var keywordShape = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// errorCalls are the functions whose string arguments are messages, not
// keywords: d.Err, d.Errf, d.ArgErr, errors.New, fmt.Errorf, ….
var errorCalls = map[string]bool{
	"Err": true, "Errf": true, "ArgErr": true, "SyntaxErr": true, "EOFErr": true,
	"Errorf": true, "New": true, "Sprintf": true, "Wrap": true, "Wrapf": true,
}

// ParserKeywords reads the Go package in dir and returns the Caddyfile
// keywords its parsers accept: the name the module is known by in a
// Caddyfile (the directive or global option it registers, or the last
// label of the ID of a module with an UnmarshalCaddyfile), and every word
// the parsers compare a token with.
//
// The parsers are every UnmarshalCaddyfile method, every function that
// takes a *caddyfile.Dispenser, every function registered as a directive
// or global option, and every function or method of the package they call,
// transitively (so a helper such as setOption(opt, v string) counts). In
// them a keyword is any lowercase word-shaped string constant — a literal
// or a constant of the package — that is not an argument of an error
// constructor: the values of case clauses (switch d.Val()), the operands
// of == and != (if name == "no_execute"), the keys of map literals
// (map[string]*string{"endpoint": …}[name]), whatever form a new parser
// takes. The test's own table (TestParserKeywordsForms) holds each form.
func ParserKeywords(dir string) (Module, error) {
	m := Module{Dir: dir}
	fset := token.NewFileSet()
	files, err := parseDir(fset, dir)
	if err != nil || len(files) == 0 {
		return m, err
	}
	consts := stringConsts(files)
	funcs := map[string][]*ast.FuncDecl{} // by name: functions and methods alike
	for _, f := range files {
		for _, decl := range f.Decls {
			if fd, ok := decl.(*ast.FuncDecl); ok && fd.Body != nil {
				funcs[fd.Name.Name] = append(funcs[fd.Name.Name], fd)
			}
		}
	}

	found := map[string]Keyword{}
	add := func(word string, pos token.Pos) {
		if !keywordShape.MatchString(word) {
			return
		}
		if _, ok := found[word]; !ok {
			p := fset.Position(pos)
			found[word] = Keyword{Word: word, Where: fmt.Sprintf("%s:%d", filepath.Base(p.Filename), p.Line)}
		}
	}

	// Roots: the parsers, and the names the module registers.
	var queue []*ast.FuncDecl
	hasUnmarshal := false
	for _, decls := range funcs {
		for _, fd := range decls {
			if fd.Name.Name == "UnmarshalCaddyfile" {
				hasUnmarshal = true
				queue = append(queue, fd)
			} else if takesDispenser(fd) || fd.Name.Name == "Validate" {
				queue = append(queue, fd)
			}
		}
	}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) < 2 {
				return true
			}
			switch callName(call) {
			case "RegisterHandlerDirective", "RegisterDirective", "RegisterGlobalOption":
				if s, ok := stringValue(call.Args[0], consts); ok {
					add(s, call.Args[0].Pos())
					m.Names = append(m.Names, s)
				}
				if id, ok := call.Args[1].(*ast.Ident); ok {
					queue = append(queue, funcs[id.Name]...)
				}
			}
			return true
		})
	}
	if hasUnmarshal {
		for _, f := range files {
			ast.Inspect(f, func(n ast.Node) bool {
				lit, ok := n.(*ast.CompositeLit)
				if !ok || !isModuleInfo(lit.Type) {
					return true
				}
				for _, elt := range lit.Elts {
					kv, ok := elt.(*ast.KeyValueExpr)
					if !ok {
						continue
					}
					if k, ok := kv.Key.(*ast.Ident); ok && k.Name == "ID" {
						if id, ok := stringValue(kv.Value, consts); ok {
							name := id[strings.LastIndex(id, ".")+1:]
							add(name, kv.Value.Pos())
							if !slices.Contains(m.Names, name) {
								m.Names = append(m.Names, name)
							}
						}
					}
				}
				return true
			})
		}
	}

	// Walk the parsers and everything of the package they call.
	seen := map[*ast.FuncDecl]bool{}
	for len(queue) > 0 {
		fd := queue[0]
		queue = queue[1:]
		if seen[fd] {
			continue
		}
		seen[fd] = true
		inspectParser(fd.Body, consts, add, func(name string) { queue = append(queue, funcs[name]...) })
	}

	for _, k := range found {
		m.Keywords = append(m.Keywords, k)
	}
	slices.SortFunc(m.Keywords, func(a, b Keyword) int { return strings.Compare(a.Word, b.Word) })
	slices.Sort(m.Names)
	return m, nil
}

// isModuleInfo reports whether t is caddy.ModuleInfo.
func isModuleInfo(t ast.Expr) bool {
	sel, ok := t.(*ast.SelectorExpr)
	return ok && sel.Sel.Name == "ModuleInfo"
}

// inspectParser reports the string constants in body that are not error
// messages, and the names of the functions body calls.
func inspectParser(body ast.Node, consts map[string]string, add func(string, token.Pos), call func(string)) {
	ast.Inspect(body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CallExpr:
			name := callName(n)
			call(name)
			if errorCalls[name] {
				return false // a message; its arguments are not keywords
			}
		case *ast.BasicLit:
			if s, ok := stringValue(n, consts); ok {
				add(s, n.Pos())
			}
		case *ast.Ident:
			if s, ok := consts[n.Name]; ok {
				add(s, n.Pos())
			}
		}
		return true
	})
}

// callName is the name of the function a call calls: f(…), x.f(…).
func callName(call *ast.CallExpr) string {
	switch fn := call.Fun.(type) {
	case *ast.Ident:
		return fn.Name
	case *ast.SelectorExpr:
		return fn.Sel.Name
	}
	return ""
}

// takesDispenser reports whether fd has a *caddyfile.Dispenser parameter.
func takesDispenser(fd *ast.FuncDecl) bool {
	for _, p := range fd.Type.Params.List {
		star, ok := p.Type.(*ast.StarExpr)
		if !ok {
			continue
		}
		if sel, ok := star.X.(*ast.SelectorExpr); ok && sel.Sel.Name == "Dispenser" {
			return true
		}
	}
	return false
}

// stringConsts maps the package's string constants to their values.
func stringConsts(files []*ast.File) map[string]string {
	consts := map[string]string{}
	for _, f := range files {
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if i < len(vs.Values) {
						if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							if s, err := strconv.Unquote(lit.Value); err == nil {
								consts[name.Name] = s
							}
						}
					}
				}
			}
		}
	}
	return consts
}

// stringValue is the value of a string literal or a string constant.
func stringValue(e ast.Expr, consts map[string]string) (string, bool) {
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind != token.STRING {
			return "", false
		}
		s, err := strconv.Unquote(e.Value)
		return s, err == nil
	case *ast.Ident:
		s, ok := consts[e.Name]
		return s, ok
	}
	return "", false
}

// parseDir parses the package's non-test Go files in dir.
func parseDir(fset *token.FileSet, dir string) ([]*ast.File, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []*ast.File
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}
