// Package archcheck measures the shape of the repository's Go code for the
// tests that hold it to its stated architecture (archcheck_test.go): how
// many funcs, types and methods a package exports (as `go doc -all` lists
// them), and how many methods each type declares.
package archcheck

import (
	"errors"
	"fmt"
	"go/ast"
	"go/build"
	"go/doc"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
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
	err := goFiles(root, false, func(rel string, _ *token.FileSet, f *ast.File) error {
		for _, decl := range f.Decls {
			if fd, ok := decl.(*ast.FuncDecl); ok && fd.Recv != nil && len(fd.Recv.List) == 1 {
				if name := receiverName(fd.Recv.List[0].Type); name != "" {
					counts[pkgOf(rel)+"."+name]++
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

// InternalInAPI lists where the exported API of the package in dir (its
// exported funcs, the exported methods of its exported types, the types
// themselves with their exported fields and interface methods, and the
// declared types of its exported vars and consts) names a type of a
// package under internal/: an embedder could hold such a value but never
// name its type. Each entry is "file:line: Decl uses pkg.Name".
func InternalInAPI(dir string) ([]string, error) {
	bp, err := build.ImportDir(dir, 0)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, name := range bp.GoFiles {
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		internal := map[string]string{} // import name → path, for internal packages
		for _, imp := range f.Imports {
			path := strings.Trim(imp.Path.Value, `"`)
			if !strings.Contains("/"+path+"/", "/internal/") {
				continue
			}
			local := path[strings.LastIndex(path, "/")+1:]
			if imp.Name != nil {
				local = imp.Name.Name
			}
			internal[local] = path
		}
		if len(internal) == 0 {
			continue
		}
		check := func(decl string, e ast.Node) {
			if e == nil {
				return
			}
			ast.Inspect(e, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if id, ok := sel.X.(*ast.Ident); ok && internal[id.Name] != "" {
					out = append(out, fmt.Sprintf("%s:%d: %s uses %s.%s", name, fset.Position(sel.Pos()).Line, decl, id.Name, sel.Sel.Name))
				}
				return false
			})
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				decl := d.Name.Name
				if d.Recv != nil && len(d.Recv.List) == 1 {
					recv := receiverName(d.Recv.List[0].Type)
					if !ast.IsExported(recv) {
						continue
					}
					decl = recv + "." + decl
				}
				check(decl, d.Type)
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if !s.Name.IsExported() {
							continue
						}
						if s.TypeParams != nil {
							check(s.Name.Name, s.TypeParams)
						}
						checkTypeExpr(s.Name.Name, s.Type, check)
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								check(n.Name, s.Type)
							}
						}
					}
				}
			}
		}
	}
	return out, nil
}

// checkTypeExpr checks the part of a declared type an embedder sees: a
// struct's exported fields (and embedded types, whose methods it gets), an
// interface's methods, anything else whole.
func checkTypeExpr(decl string, e ast.Expr, check func(string, ast.Node)) {
	switch t := e.(type) {
	case *ast.StructType:
		for _, fld := range t.Fields.List {
			if len(fld.Names) == 0 {
				check(decl, fld.Type) // embedded: its exported methods are promoted
				continue
			}
			for _, n := range fld.Names {
				if n.IsExported() {
					check(decl+"."+n.Name, fld.Type)
				}
			}
		}
	case *ast.InterfaceType:
		for _, m := range t.Methods.List {
			check(decl, m.Type)
		}
	default:
		check(decl, e)
	}
}

// Inits lists the non-test Go files below root (relative, with slashes)
// that declare a func init(), skipping testdata, node_modules and hidden
// directories.
func Inits(root string) ([]string, error) {
	var out []string
	err := goFiles(root, false, func(rel string, _ *token.FileSet, f *ast.File) error {
		for _, decl := range f.Decls {
			if fd, ok := decl.(*ast.FuncDecl); ok && fd.Recv == nil && fd.Name.Name == "init" {
				out = append(out, rel)
				break
			}
		}
		return nil
	})
	sort.Strings(out)
	return out, err
}

// Service is a type of non-test code that declares a method Start or Run
// taking a context first (the two start/stop contracts issue 26 found),
// and whether it embeds startstop.Base.
type Service struct {
	// Type is the type, as its package directory (relative to the root)
	// and its name: "internal/engine.Pool".
	Type string
	// Method is Start or Run.
	Method string
	// Base is whether the type's struct embeds startstop.Base.
	Base bool
}

// Services lists the types of root's module (nested modules left out)
// whose non-test code declares Start(ctx context.Context, ...) or
// Run(ctx context.Context, ...), in order of Type.
func Services(root string) ([]Service, error) {
	methods := map[string]string{} // type → Start or Run
	based := map[string]bool{}
	err := goFiles(root, true, func(rel string, _ *token.FileSet, f *ast.File) error {
		pkg := pkgOf(rel) + "."
		if pkg == ".." {
			pkg = "inboxd."
		}
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				name := d.Name.Name
				if d.Recv == nil || len(d.Recv.List) != 1 || (name != "Start" && name != "Run") || len(d.Type.Params.List) == 0 {
					continue
				}
				if sel, ok := d.Type.Params.List[0].Type.(*ast.SelectorExpr); !ok || sel.Sel.Name != "Context" {
					continue
				}
				if t := receiverName(d.Recv.List[0].Type); t != "" && methods[pkg+t] != "Start" {
					methods[pkg+t] = name
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					ts, ok := s.(*ast.TypeSpec)
					if !ok {
						continue
					}
					st, ok := ts.Type.(*ast.StructType)
					if !ok {
						continue
					}
					for _, fld := range st.Fields.List {
						if sel, ok := fld.Type.(*ast.SelectorExpr); ok && len(fld.Names) == 0 && sel.Sel.Name == "Base" {
							if id, ok := sel.X.(*ast.Ident); ok && id.Name == "startstop" {
								based[pkg+ts.Name.Name] = true
							}
						}
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]Service, 0, len(methods))
	for t, m := range methods {
		out = append(out, Service{Type: t, Method: m, Base: based[t]})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Type < out[j].Type })
	return out, nil
}

// Import is one import of a package of the module by another, both named
// by their directory relative to the module's root ("." for the root
// package).
type Import struct {
	From, To string
}

// Imports lists the imports between the packages of the module at root
// (nested modules, testdata, node_modules and hidden directories left
// out) made by their non-test code: the layering the code has. modPath is
// the module's path.
func Imports(root, modPath string) ([]Import, error) {
	var out []Import
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if skipDir(root, path, true) {
			return filepath.SkipDir
		}
		bp, err := build.ImportDir(path, 0)
		if err != nil {
			var none *build.NoGoError
			if errors.As(err, &none) {
				return nil
			}
			return err
		}
		from, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		for _, imp := range bp.Imports {
			switch {
			case imp == modPath:
				out = append(out, Import{From: filepath.ToSlash(from), To: "."})
			case strings.HasPrefix(imp, modPath+"/"):
				out = append(out, Import{From: filepath.ToSlash(from), To: strings.TrimPrefix(imp, modPath+"/")})
			}
		}
		return nil
	})
	return out, err
}

// EnvReads lists the calls of os.Getenv, os.LookupEnv, os.Environ and
// os.ExpandEnv in the non-test code of root's module (nested modules
// left out), as "file:line" relative to root.
func EnvReads(root string) ([]string, error) {
	var out []string
	err := goFiles(root, true, func(rel string, fset *token.FileSet, f *ast.File) error {
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == "os" {
				switch sel.Sel.Name {
				case "Getenv", "LookupEnv", "Environ", "ExpandEnv":
					out = append(out, fmt.Sprintf("%s:%d", rel, fset.Position(sel.Pos()).Line))
				}
			}
			return true
		})
		return nil
	})
	return out, err
}

// skipDir reports whether a walk of root leaves out the directory path:
// testdata, node_modules and hidden directories, and nested modules when
// ownModule is set.
func skipDir(root, path string, ownModule bool) bool {
	if path == root {
		return false
	}
	if name := filepath.Base(path); name == "testdata" || name == "node_modules" || strings.HasPrefix(name, ".") {
		return true
	}
	if ownModule {
		if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
			return true
		}
	}
	return false
}

// goFiles calls fn with every non-test Go file below root (skipDir's
// directories left out), parsed, with its path relative to root in
// slashes.
func goFiles(root string, ownModule bool, fn func(rel string, fset *token.FileSet, f *ast.File) error) error {
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if skipDir(root, path, ownModule) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		return fn(filepath.ToSlash(rel), fset, f)
	})
}

// pkgOf is the package directory of the file rel ("." for the root).
func pkgOf(rel string) string { return filepath.ToSlash(filepath.Dir(rel)) }

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
