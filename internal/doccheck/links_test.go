package doccheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// root is the repository's top directory, from this package's.
const root = "../.."

// docFiles returns README.md and every Markdown file under docs/.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{filepath.Join(root, "README.md")}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestRelativeLinksResolve checks that every relative link in README.md and
// docs/ names a file or directory of the repository, and that every #anchor
// names a heading of the page it points at (GitHub's anchors). `make lint`
// runs it; so does `make test`.
func TestRelativeLinksResolve(t *testing.T) {
	t.Parallel()
	abs, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]map[string]bool{}
	anchorsOf := func(p string) map[string]bool {
		if a, ok := anchors[p]; ok {
			return a
		}
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		anchors[p] = Anchors(data)
		return anchors[p]
	}
	checked := 0
	for _, f := range docFiles(t) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, f)
		for _, l := range Links(data) {
			if !IsRelative(l.Target) {
				continue
			}
			checked++
			path, anchor, _ := strings.Cut(l.Target, "#")
			path, _, _ = strings.Cut(path, "?")
			target := f
			if path != "" {
				target = filepath.Join(filepath.Dir(f), filepath.FromSlash(path))
			}
			ta, err := filepath.Abs(target)
			if err != nil {
				t.Fatal(err)
			}
			if r, err := filepath.Rel(abs, ta); err != nil || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator)) {
				t.Errorf("%s:%d: link %q leaves the repository", rel, l.Line, l.Target)
				continue
			}
			st, err := os.Stat(target)
			if err != nil {
				t.Errorf("%s:%d: link %q: no such file", rel, l.Line, l.Target)
				continue
			}
			if anchor == "" {
				continue
			}
			if st.IsDir() || !strings.HasSuffix(target, ".md") {
				t.Errorf("%s:%d: link %q: an anchor into a file that is not Markdown", rel, l.Line, l.Target)
				continue
			}
			if !anchorsOf(target)[anchor] {
				t.Errorf("%s:%d: link %q: %s has no heading with anchor #%s", rel, l.Line, l.Target, filepath.Base(target), anchor)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative link found at all: the check would pass on anything")
	}
}

// TestREADMELinksIntoDocs: the README is a landing page whose links lead into docs/.
func TestREADMELinksIntoDocs(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	linked := map[string]bool{}
	for _, l := range Links(data) {
		if p, _, _ := strings.Cut(l.Target, "#"); strings.HasPrefix(p, "docs/") {
			linked[p] = true
		}
	}
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) == 0 {
		t.Fatal("docs/ has no page")
	}
	for _, p := range pages {
		if name := "docs/" + filepath.Base(p); !linked[name] {
			t.Errorf("README.md does not link to %s", name)
		}
	}
}
