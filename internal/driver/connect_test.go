package driver

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/internal/pgtest"
)

// connectErr connects to connString as the daemon does (a single pgx
// connection, or a pool and Ping) and returns the error, which must not be
// nil.
func connectErr(t *testing.T, connString string, viaPool bool) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var err error
	if viaPool {
		var pool *pgxpool.Pool
		if pool, err = pgxpool.New(ctx, connString); err != nil {
			t.Fatalf("pgxpool.New: %v", err)
		}
		err = pool.Ping(ctx)
		pool.Close()
	} else {
		var conn *pgx.Conn
		if conn, err = pgx.Connect(ctx, connString); err == nil {
			_ = conn.Close(ctx)
		}
	}
	if err == nil {
		t.Fatalf("connecting to %s succeeded", connString)
	}
	return err
}

func randomName(prefix string) string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// withUserDB returns the admin URL with user, password and database (any
// may be empty to keep the admin's) and extra query parameters.
func withUserDB(t *testing.T, user, password, database, query string) string {
	t.Helper()
	u, err := url.Parse(pgtest.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	if user == "" {
		user = u.User.Username()
	}
	if password != "" {
		u.User = url.UserPassword(user, password)
	} else {
		u.User = url.User(user)
	}
	if database != "" {
		u.Path = "/" + database
	}
	if query != "" {
		if u.RawQuery != "" {
			u.RawQuery += "&"
		}
		u.RawQuery += query
	}
	return u.String()
}

// The errors the real server gives: every one is classified, named with
// its SQLSTATE, and neither the reason nor the error itself shows the
// password in the connection string (the server trusts 127.0.0.1 here, so
// the password is sent nowhere but is in the configuration pgx reports on).
func TestClassifyConnectErrorRealServer(t *testing.T) {
	t.Parallel()
	const password = "S3cret-Pw-do-not-print"
	db := pgtest.NewEmpty(t, false)

	// A role that may log in but has no CONNECT on db: 42501.
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, pgtest.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	role := randomName("inboxd_norole_")
	if _, err := admin.Exec(ctx, fmt.Sprintf(`CREATE ROLE %s LOGIN PASSWORD '%s'`, role, password)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if c, err := pgx.Connect(ctx, pgtest.AdminURL()); err == nil {
			_, _ = c.Exec(ctx, "DROP ROLE IF EXISTS "+role)
			_ = c.Close(ctx)
		}
	})
	if _, err := admin.Exec(ctx, fmt.Sprintf(`REVOKE CONNECT ON DATABASE %s FROM PUBLIC`, db.Name)); err != nil {
		t.Fatal(err)
	}

	closedPort := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return ln.Addr().String()
	}()

	tests := []struct {
		name      string
		conn      string
		permanent bool
		want      string
	}{
		{"database does not exist", withUserDB(t, "", password, randomName("inboxd_nodb_"), ""), true, "(SQLSTATE 3D000)"},
		{"database does not exist, no TLS", withUserDB(t, "", password, randomName("inboxd_nodb_"), "sslmode=disable"), true, "(SQLSTATE 3D000)"},
		{"role does not exist", withUserDB(t, randomName("inboxd_nouser_"), password, "", ""), true, "(SQLSTATE 28000)"},
		{"no CONNECT privilege", withUserDB(t, role, password, db.Name, ""), true, "(SQLSTATE 42501)"},
		{"unknown setting", withUserDB(t, "", password, "", "no_such_setting=1"), true, "(SQLSTATE 42704)"},
		{"bad setting value", withUserDB(t, "", password, "", "statement_timeout=abc"), true, "(SQLSTATE 22023)"},
		{"database not accepting connections", withUserDB(t, "", password, "template0", ""), true, "(SQLSTATE 55000)"},
		{"certificate not valid for the host", withUserDB(t, "", password, "", "sslmode=verify-full"), true, "x509: "},
		{"connection refused", "postgres://u:" + password + "@" + closedPort + "/db", false, "connection refused"},
		{"host not found", "postgres://u:" + password + "@inboxd-no-such-host.invalid:5432/db?connect_timeout=5", false, "inboxd-no-such-host.invalid"},
	}
	for _, tt := range tests {
		for _, viaPool := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s pool=%v", tt.name, viaPool), func(t *testing.T) {
				t.Parallel()
				err := connectErr(t, tt.conn, viaPool)
				permanent, reason := ClassifyConnect(err)
				if permanent != tt.permanent || !strings.Contains(reason, tt.want) {
					t.Errorf("ClassifyConnect = %v, %q; want %v and %q\nerror: %v", permanent, reason, tt.permanent, tt.want, err)
				}
				if strings.Contains(reason, "\n") || !strings.HasPrefix(reason, "user=") {
					t.Errorf("reason %q: want one line starting with user=", reason)
				}
				if strings.Contains(reason, password) || strings.Contains(err.Error(), password) {
					t.Errorf("the password shows in %q / %q", reason, err)
				}
			})
		}
	}
}

// fakeServer is a PostgreSQL stand-in on 127.0.0.1 that refuses TLS, asks
// for a cleartext password and answers 28P01 to any password, as a server
// whose pg_hba.conf says "password" would for a wrong one. The shared test
// server trusts 127.0.0.1, so it cannot produce 28P01 itself.
type fakeServer struct {
	addr string
	mu   sync.Mutex
	got  []string // passwords received
}

func startFakeServer(t *testing.T) *fakeServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &fakeServer{addr: ln.Addr().String()}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { s.serve(conn) })
		}
	})
	return s
}

func (s *fakeServer) serve(conn net.Conn) {
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	be := pgproto3.NewBackend(conn, conn)
	for {
		msg, err := be.ReceiveStartupMessage()
		if err != nil {
			return
		}
		switch msg.(type) {
		case *pgproto3.SSLRequest, *pgproto3.GSSEncRequest:
			if _, err := conn.Write([]byte("N")); err != nil {
				return
			}
			continue
		case *pgproto3.StartupMessage:
		default:
			return
		}
		break
	}
	be.Send(&pgproto3.AuthenticationCleartextPassword{})
	if be.Flush() != nil || be.SetAuthType(pgproto3.AuthTypeCleartextPassword) != nil {
		return
	}
	msg, err := be.Receive()
	if err != nil {
		return
	}
	if pw, ok := msg.(*pgproto3.PasswordMessage); ok {
		s.mu.Lock()
		s.got = append(s.got, pw.Password)
		s.mu.Unlock()
	}
	be.Send(&pgproto3.ErrorResponse{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: "28P01",
		Message: `password authentication failed for user "inboxd"`})
	_ = be.Flush()
}

// A wrong password: permanent, named 28P01, and the password pgx sent does
// not show in the reason or the error.
func TestClassifyConnectErrorWrongPassword(t *testing.T) {
	t.Parallel()
	const password = "wr0ng-Pw-do-not-print"
	s := startFakeServer(t)
	for _, sslmode := range []string{"prefer", "disable"} {
		for _, viaPool := range []bool{false, true} {
			err := connectErr(t, "postgres://inboxd:"+password+"@"+s.addr+"/app?sslmode="+sslmode, viaPool)
			permanent, reason := ClassifyConnect(err)
			want := `user=inboxd database=app: FATAL: password authentication failed for user "inboxd" (SQLSTATE 28P01)`
			if !permanent || reason != want {
				t.Errorf("sslmode=%s pool=%v: ClassifyConnect = %v, %q; want true, %q\nerror: %v", sslmode, viaPool, permanent, reason, want, err)
			}
			if strings.Contains(reason, password) || strings.Contains(err.Error(), password) {
				t.Errorf("the password shows in %q / %q", reason, err)
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.got) == 0 || s.got[0] != password {
		t.Fatalf("the fake server got passwords %q, want %q: the test did not exercise authentication", s.got, password)
	}
}

// Errors that the test server cannot be made to give, built the way pgconn
// builds them: one joined error per attempt, each "address (host): step:
// cause". The first case is the exact shape a real PostgreSQL 15 with
// scram-sha-256 and no TLS gave for a wrong password (observed once on a
// throwaway cluster): sslmode=prefer's TLS attempt, then the SASL failure.
func TestClassifyConnectErrorShapes(t *testing.T) {
	t.Parallel()
	pgErr := func(code, msg string) error {
		return &pgconn.PgError{Severity: "FATAL", Code: code, Message: msg}
	}
	attemptErr := func(step string, cause error) error {
		return fmt.Errorf("10.0.0.5:5432 (db.internal): %s: %w", step, cause)
	}
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: &net.AddrError{Err: "connect: connection refused"}}
	tests := []struct {
		name      string
		err       error
		permanent bool
		reason    string
	}{
		{"nil", nil, false, ""},
		{"wrong password, sslmode=prefer", errors.Join(
			attemptErr("tls error", errors.New("server refused TLS connection")),
			attemptErr("failed SASL auth", pgErr("28P01", `password authentication failed for user "admin"`))),
			true, `FATAL: password authentication failed for user "admin" (SQLSTATE 28P01)`},
		{"starting up, sslmode=prefer", errors.Join(
			attemptErr("tls error", errors.New("server refused TLS connection")),
			attemptErr("server error", pgErr("57P03", "the database system is starting up"))),
			false, "FATAL: the database system is starting up (SQLSTATE 57P03)"},
		{"too many connections", attemptErr("server error", pgErr("53300", "sorry, too many clients already")),
			false, "FATAL: sorry, too many clients already (SQLSTATE 53300)"},
		{"shutting down", attemptErr("server error", pgErr("57P01", "terminating connection due to administrator command")),
			false, "(SQLSTATE 57P01)"},
		{"no pg_hba entry, with hint", attemptErr("server error", &pgconn.PgError{Severity: "FATAL", Code: "28000",
			Message: `no pg_hba.conf entry for host "10.0.0.9", user "inboxd", database "app", no encryption`, Hint: "check pg_hba.conf"}),
			true, `no encryption (SQLSTATE 28000) (hint: check pg_hba.conf)`},
		{"no CONNECT", attemptErr("server error", pgErr("42501", `permission denied for database "app"`)), true, "(SQLSTATE 42501)"},
		{"one host down, the other without the database", errors.Join(
			attemptErr("dial error", refused),
			attemptErr("server error", pgErr("3D000", `database "app" does not exist`))),
			false, `FATAL: database "app" does not exist (SQLSTATE 3D000); 10.0.0.5:5432 (db.internal): dial error: dial tcp: connect: connection refused`},
		{"same error twice is named once", errors.Join(
			attemptErr("server error", pgErr("28000", `role "x" does not exist`)),
			attemptErr("server error", pgErr("28000", `role "x" does not exist`))),
			true, `FATAL: role "x" does not exist (SQLSTATE 28000)`},
		{"TLS required, server has none", errors.Join(attemptErr("tls error", errors.New("server refused TLS connection"))),
			true, "10.0.0.5:5432 (db.internal): tls error: server refused TLS connection"},
		{"certificate not trusted", attemptErr("failed to write startup message", &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}),
			true, "tls: failed to verify certificate: x509: certificate signed by unknown authority"},
		{"certificate for another host", attemptErr("tls error", x509.HostnameError{Certificate: &x509.Certificate{}, Host: "db.internal"}), true, "tls error"},
		{"require_auth", attemptErr("require_auth check failed", errors.New(`authentication method requirement "md5" failed: server requested scram-sha-256 authentication`)),
			true, "require_auth check failed"},
		{"connection refused", errors.Join(attemptErr("dial error", refused), attemptErr("dial error", refused)), false, "connection refused"},
		{"reset", attemptErr("failed to receive message", syscall.ECONNRESET), false, "connection reset"},
		{"DNS", fmt.Errorf("hostname resolving error: %w", errors.Join(&net.DNSError{Err: "no such host", Name: "db.internal", IsNotFound: true})),
			false, "lookup db.internal: no such host"},
		{"timeout", attemptErr("dial error", context.DeadlineExceeded), false, "context deadline exceeded"},
		{"cancelled", attemptErr("dial error", context.Canceled), false, "context canceled"},
		{"parse error never quoted", &pgconn.ParseConfigError{ConnString: "postgres://u:hunter2@h/db"}, true, "invalid connection settings"},
		{"unknown", errors.New("something\nelse"), false, "something; else"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			permanent, reason := ClassifyConnect(tt.err)
			if permanent != tt.permanent || !strings.Contains(reason, tt.reason) || (tt.reason == "" && reason != "") {
				t.Errorf("ClassifyConnect = %v, %q; want %v, %q", permanent, reason, tt.permanent, tt.reason)
			}
			if strings.Contains(reason, "\n") || strings.Contains(reason, "hunter2") {
				t.Errorf("reason %q is not one line, or shows a password", reason)
			}
		})
	}
}

// Connecting reads SQLSTATEs as statements do (sqlStateKind) but for the
// three differences connectPermanent names: a bad setting value, a
// protocol violation and a database not accepting connections are
// permanent, and a data error is no row's fault.
func TestConnectPermanentAgainstClassify(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		code      string
		statement ErrorKind
		connect   bool
	}{
		{"28000", Permanent, true},
		{"28P01", Permanent, true},
		{"3D000", Permanent, true},
		{"42501", Permanent, true},
		{"42704", Permanent, true},
		{"0A000", Permanent, true},
		{"22023", DataError, true},
		{"08P01", Transient, true},
		{"55000", Transient, true},
		{"54000", DataError, false},
		{"XX001", DataError, false},
		{"XX000", Transient, false},
		{"57P03", Transient, false},
		{"53300", Transient, false},
		{"08006", Transient, false},
		{"", Transient, false},
	} {
		if got := sqlStateKind(tt.code); got != tt.statement {
			t.Errorf("sqlStateKind(%q) = %v, want %v", tt.code, got, tt.statement)
		}
		if got := connectPermanent(tt.code); got != tt.connect {
			t.Errorf("connectPermanent(%q) = %v, want %v", tt.code, got, tt.connect)
		}
	}
}
