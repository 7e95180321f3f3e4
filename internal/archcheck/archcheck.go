// Package archcheck measures the shape of the repository's Go code for the
// tests that hold it to its stated architecture (archcheck_test.go): how
// many funcs, types and methods a package exports (as `go doc -all` lists
// them), and how many methods each type declares.
package archcheck

import (
	"go/ast"
	"go/build"
	"go/doc"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
)

// Exported is how many funcs, types and methods the package in dir
// exports, as `go doc -all` lists them: funcs, types, and the funcs and
// methods listed under each type.
func Exported(dir string) (int, error) {
	bp, err := build.ImportDir(dir, 0)
	if err != nil {
		return 0, err
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, name := range bp.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.ParseComments)
		if err != nil {
			return 0, err
		}
		files = append(files, f)
	}
	p, err := doc.NewFromFiles(fset, files, bp.ImportPath)
	if err != nil {
		return 0, err
	}
	n := len(p.Funcs)
	for _, t := range p.Types {
		n += 1 + len(t.Funcs) + len(t.Methods)
	}
	return n, nil
}

// TypeMethods is one type's count of declared methods.
type TypeMethods struct {
	// Type is the type, as its package directory (relative to the root)
	// and its name: "internal/engine.Pool".
	Type string
	// Methods is how many methods its non-test code declares.
	Methods int
}

// Methods counts the methods every type below root declares in non-test
// code (directories named testdata or node_modules, and hidden ones, left
// out), widest first.
func Methods(root string) ([]TypeMethods, error) {
	counts := map[string]int{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (name == "testdata" || name == "node_modules" || strings.HasPrefix(name, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			if fd, ok := decl.(*ast.FuncDecl); ok && fd.Recv != nil && len(fd.Recv.List) == 1 {
				if name := receiverName(fd.Recv.List[0].Type); name != "" {
					counts[filepath.ToSlash(rel)+"."+name]++
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]TypeMethods, 0, len(counts))
	for t, n := range counts {
		out = append(out, TypeMethods{Type: t, Methods: n})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Methods != out[j].Methods {
			return out[i].Methods > out[j].Methods
		}
		return out[i].Type < out[j].Type
	})
	return out, nil
}

// receiverName is the name of the type of a method's receiver expression
// (T, *T, T[P], *T[P]).
func receiverName(e ast.Expr) string {
	if s, ok := e.(*ast.StarExpr); ok {
		e = s.X
	}
	switch x := e.(type) {
	case *ast.IndexExpr:
		e = x.X
	case *ast.IndexListExpr:
		e = x.X
	}
	if id, ok := e.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}

// LinkedModules lists the modules named in out, the output of `go version
// -m` on a binary: its main module (path) first, then each dependency (dep),
// a replaced one under its own path.
func LinkedModules(out string) []string {
	var mods []string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && (f[0] == "mod" || f[0] == "dep") {
			mods = append(mods, f[1])
		}
	}
	return mods
}
