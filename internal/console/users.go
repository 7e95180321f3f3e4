package console

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/internal/opfiles"
)

// Role is what an operator may do in the console; each role may do what
// the roles below it may.
type Role int

// The roles.
const (
	// RoleNone may do nothing: a request without a credential.
	RoleNone Role = iota
	// RoleViewer reads every page.
	RoleViewer
	// RoleOperator acts on rows (requeue, discard, cancel, retry now, bulk
	// actions up to Config.BulkAdminOver rows) and pauses and resumes
	// routes.
	RoleOperator
	// RoleAdmin also changes rate limits and breakers and runs bulk actions
	// over Config.BulkAdminOver rows.
	RoleAdmin
)

// roleNames are the roles as the users file and the pages name them.
var roleNames = map[Role]string{RoleViewer: "viewer", RoleOperator: "operator", RoleAdmin: "admin"}

// String returns the role's name ("" for RoleNone).
func (r Role) String() string { return roleNames[r] }

// ParseRole reads a role's name: viewer, operator or admin.
func ParseRole(s string) (Role, error) {
	for r, n := range roleNames {
		if n == s {
			return r, nil
		}
	}
	return RoleNone, fmt.Errorf("role %q: must be viewer, operator or admin", s)
}

// HashToken is how the users file keeps a token: "sha256:" and the hex of
// the token's SHA-256. Tokens are random (at least 16 characters, say 32
// random bytes): a fast hash is enough for them, and a bearer request
// costs no key stretching.
func HashToken(token string) string {
	h := sha256.Sum256([]byte(token))
	return "sha256:" + hex.EncodeToString(h[:])
}

// user is one line of the users file.
type user struct {
	name string
	role Role
	// hash is the token's SHA-256; zero for a user who signs in through the
	// trusted proxy alone ("-" in the file).
	hash    [32]byte
	noToken bool
}

// userSet is the users file as last read.
type userSet struct {
	byName map[string]user
	byHash map[[32]byte]user
}

// parseUsers reads a users file: a line per operator, "name role hash",
// where hash is HashToken's form or "-" (the trusted proxy's users); blank
// lines and lines starting with # are skipped. Every bad line is an error
// naming it.
func parseUsers(name string, b []byte) (userSet, error) {
	s := userSet{byName: map[string]user{}, byHash: map[[32]byte]user{}}
	var errs []error
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 3 {
			errs = append(errs, opfiles.Errorf(name, n, "want three fields, name role sha256:<hex> (or - for the proxy's users), got %d", len(f)))
			continue
		}
		u := user{name: f[0]}
		if !validName(u.name) {
			errs = append(errs, opfiles.Errorf(name, n, "name %q: letters, digits and . _ @ + - only", u.name))
			continue
		}
		var err error
		if u.role, err = ParseRole(f[1]); err != nil {
			errs = append(errs, opfiles.Errorf(name, n, "%v", err))
			continue
		}
		if f[2] == "-" {
			u.noToken = true
		} else {
			hx, ok := strings.CutPrefix(f[2], "sha256:")
			raw, herr := hex.DecodeString(hx)
			if !ok || herr != nil || len(raw) != 32 {
				errs = append(errs, opfiles.Errorf(name, n, "the token's hash must be sha256:<64 hex digits> (the sha256sum of the token) or -"))
				continue
			}
			copy(u.hash[:], raw)
			if o, dup := s.byHash[u.hash]; dup {
				errs = append(errs, opfiles.Errorf(name, n, "%s has the token of %s: every operator needs their own", u.name, o.name))
				continue
			}
		}
		if _, dup := s.byName[u.name]; dup {
			errs = append(errs, opfiles.Errorf(name, n, "%s is named twice", u.name))
			continue
		}
		s.byName[u.name] = u
		if !u.noToken {
			s.byHash[u.hash] = u
		}
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, err)
	}
	return s, opfiles.Join(name, errs)
}

// validName reports whether name may name an operator: it shows in pages,
// logs and the audit trail as it is.
func validName(name string) bool {
	if name == "" || len(name) > 128 {
		return false
	}
	for _, r := range name {
		if !(unicode.IsLetter(r) || unicode.IsDigit(r) || strings.ContainsRune("._@+-", r)) {
			return false
		}
	}
	return true
}

// maxUsersBytes caps the users file: a line per operator, a few thousand
// operators.
const maxUsersBytes = 1 << 20

// usersCheckEvery is how often the users file is looked at for a change:
// a rotated token or a new operator counts from the next check on, no
// restart needed.
const usersCheckEvery = time.Second

// usersFile is the users file, read again when it changes (its size or
// modification time), at most once every usersCheckEvery. A change that
// does not parse keeps the users as they were, and says why in the log.
type usersFile struct {
	path string
	log  zerolog.Logger
	now  func() time.Time

	mu      sync.Mutex
	set     userSet
	checked time.Time
	stamp   string // the size and modification time last read
}

// loadUsers reads the users file at path.
func loadUsers(path string, now func() time.Time, log zerolog.Logger) (*usersFile, error) {
	f := &usersFile{path: path, log: log, now: now}
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	b, err := opfiles.Read(path, maxUsersBytes)
	if err != nil {
		return nil, err
	}
	if f.set, err = parseUsers(path, b); err != nil {
		return nil, err
	}
	f.stamp, f.checked = stampOf(st), now()
	return f, nil
}

// stampOf is what says a file changed.
func stampOf(st os.FileInfo) string { return fmt.Sprint(st.Size(), st.ModTime().UnixNano()) }

// users returns the users as the file says now.
func (f *usersFile) users() userSet {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	if now.Sub(f.checked) < usersCheckEvery && !now.Before(f.checked) {
		return f.set
	}
	f.checked = now
	st, err := os.Stat(f.path)
	if err != nil {
		f.log.Error().Err(err).Msg("users file: cannot be read; the users stay as they were")
		return f.set
	}
	if stampOf(st) == f.stamp {
		return f.set
	}
	b, err := opfiles.Read(f.path, maxUsersBytes)
	if err != nil {
		f.log.Error().Err(err).Msg("users file: cannot be read; the users stay as they were")
		return f.set
	}
	set, err := parseUsers(f.path, b)
	if err != nil {
		f.stamp = stampOf(st) // said once, until the file changes again
		f.log.Error().Err(err).Msg("users file: changed but not valid; the users stay as they were")
		return f.set
	}
	f.set, f.stamp = set, stampOf(st)
	f.log.Info().Int("users", len(set.byName)).Msg("users file: read again")
	return f.set
}
