package model

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// repoRoot is the repository, from this package's directory.
const repoRoot = "../.."

// sqlDir holds the statement files the models name.
const sqlDir = "../driver/sql"

// TestModelsFollowTheCode checks that every statement file a model names
// (@sql) is in internal/driver/sql and that every Go function it names
// (@go (*T).m, T.m) is declared, with that receiver type and name, in a
// non-test Go file of the repository, whatever its package: a model whose
// code moved or went away fails here until it follows.
func TestModelsFollowTheCode(t *testing.T) {
	models := loadModels(t)
	decls := goMethods(t)
	for _, m := range models {
		for _, s := range m.sqls {
			if _, err := os.Stat(filepath.Join(sqlDir, s)); err != nil {
				t.Errorf("%s names @sql %s, which is not in internal/driver/sql: update the model to the statement that replaced it", m.name, s)
			}
		}
		for _, g := range m.gos {
			key := methodKey(g)
			if len(decls[key]) == 0 {
				t.Errorf("%s names @go %s, which no non-test Go file of the repository declares: update the model to the code that replaced it", m.name, g)
			}
		}
	}
}

// methodKey is "T.m" for a model's (*T).m or T.m.
func methodKey(g string) string {
	g = strings.TrimPrefix(g, "(*")
	return strings.Replace(g, ").", ".", 1)
}

// goMethods returns, by "T.m", the files that declare method m on T (or
// *T), over every non-test Go file of the repository.
func goMethods(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(repoRoot, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "node_modules", "testdata", "vendor":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || len(fn.Recv.List) == 0 {
				continue
			}
			if recv := receiverType(fn.Recv.List[0].Type); recv != "" {
				key := recv + "." + fn.Name.Name
				out[key] = append(out[key], p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("reading the repository's Go files: %v", err)
	}
	return out
}

// receiverType is the name of a method's receiver type: T for T, *T, T[K].
func receiverType(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.StarExpr:
		return receiverType(x.X)
	case *ast.IndexExpr:
		return receiverType(x.X)
	case *ast.IndexListExpr:
		return receiverType(x.X)
	case *ast.Ident:
		return x.Name
	}
	return ""
}

// The guarantees pages and their model markers: a table row's tests cell
// ends with "model-checked: [`lease.pml` `P_fenced`, …](…#model-checked-protocols)".
var (
	markerRe     = regexp.MustCompile(`model-checked: \[([^\]]+)\]\(([^)]+)\)`)
	markerItemRe = regexp.MustCompile(`\x60(\w+\.pml)\x60 \x60(P_\w+)\x60`)
)

// TestGuaranteesLinkTheModels checks the guarantees tables (docs/guarantees.md
// and the outbox's, docs/outbox.md) against the models: every marker names
// a property a model asserts and links to the section that shows it, and
// every property of every model is linked from the guarantee it covers.
func TestGuaranteesLinkTheModels(t *testing.T) {
	models := loadModels(t)
	props := map[string]bool{}
	for _, m := range models {
		for _, p := range m.props {
			props[m.name+" "+p.name] = false
		}
	}
	pages := map[string]string{
		"docs/guarantees.md": "#model-checked-protocols",
		"docs/outbox.md":     "guarantees.md#model-checked-protocols",
	}
	for page, target := range pages {
		data, err := os.ReadFile(filepath.Join(repoRoot, page))
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(data), "\n") {
			for _, mk := range markerRe.FindAllStringSubmatch(line, -1) {
				if mk[2] != target {
					t.Errorf("%s:%d: a model marker links to %q, not %q", page, i+1, mk[2], target)
				}
				items := markerItemRe.FindAllStringSubmatch(mk[1], -1)
				if len(items) == 0 {
					t.Errorf("%s:%d: a model marker names no `model.pml` `P_property`: %q", page, i+1, mk[1])
				}
				for _, it := range items {
					key := it[1] + " " + it[2]
					if _, ok := props[key]; !ok {
						t.Errorf("%s:%d: the marker names %s %s, which no model asserts", page, i+1, it[1], it[2])
						continue
					}
					props[key] = true
				}
			}
		}
	}
	for key, linked := range props {
		if !linked {
			t.Errorf("%s is linked from no guarantee (docs/guarantees.md, docs/outbox.md): say which guarantee it covers", key)
		}
	}
}
