package driver

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// ClassifyConnect says whether err, returned by connecting to
// PostgreSQL (pgx.ConnectConfig, pgxpool.Pool.Ping or Acquire), is
// permanent, that is, a mistake in the configuration or on the server that
// retrying cannot fix, and names it in reason.
//
// Contract:
//
//   - permanent is true only when every connection attempt in err (pgx tries
//     each host, and TLS then plain text with sslmode=prefer, and joins the
//     errors) failed permanently: the server answered with a SQLSTATE
//     connectPermanent reads as permanent (a role that does not exist, a
//     wrong password, a missing database, no CONNECT privilege, an unknown
//     setting or a bad setting value, an unsupported protocol, a database
//     not accepting connections), or, on the client side, certificate
//     verification and other TLS handshake failures, a server that refuses
//     TLS when it is required, require_auth, channel_binding and
//     sslcertmode checks, SASL or GSS failures, protocol-version mismatches
//     and unparsable settings.
//   - Everything else is transient: connection refused or reset, timeouts,
//     DNS failures, the server starting up or shutting down (57P03, 57P01),
//     too many connections (53300) and other resource errors (53, 58, XX),
//     a cancelled context, and any error not recognised.
//   - reason is one line: the server's errors as "<severity>: <message>
//     (SQLSTATE <code>)" (plus the hint, if any), then the client-side
//     failures as pgx words them ("<address> (<host>): dial error: …"):
//     all of them when the server never answered, else only the transient
//     ones; each distinct text once, joined with "; ". It is prefixed with
//     "user=… database=…: " when err carries the connection's
//     configuration. It holds what pgx and the
//     server put in their messages (addresses, host, user and database
//     names, SQLSTATE) and never the connection string or the password:
//     neither pgx's connect errors nor PostgreSQL's authentication errors
//     quote a password, and config.Validate refuses connection strings that
//     would put part of one in a host, user or database name.
//   - ClassifyConnect(nil) is (false, "").
func ClassifyConnect(err error) (permanent bool, reason string) {
	if err == nil {
		return false, ""
	}
	var attempts []attempt
	collectAttempts(err, &attempts)

	permanent = len(attempts) > 0
	var parts []string
	for _, a := range attempts {
		permanent = permanent && a.permanent
		if a.server {
			parts = appendNew(parts, a.reason)
		}
	}
	// Then the client-side failures: all of them when the server never
	// answered, else only the transient ones (why err is not permanent),
	// leaving out noise such as sslmode=prefer's refused TLS attempt.
	serverAnswered := len(parts) > 0
	for _, a := range attempts {
		if !a.server && (!serverAnswered || !a.permanent) {
			parts = appendNew(parts, a.reason)
		}
	}
	reason = strings.Join(parts, "; ")
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) && ce.Config != nil {
		reason = "user=" + ce.Config.User + " database=" + ce.Config.Database + ": " + reason
	}
	return permanent, joinLines(reason)
}

// attempt is the classification of one branch of a connect error.
type attempt struct {
	permanent bool
	server    bool // the reason is the server's ErrorResponse
	reason    string
}

// collectAttempts splits err at every joined error (one branch per host and
// TLS mode tried) and classifies each branch.
func collectAttempts(err error, out *[]attempt) {
	for e := err; e != nil; {
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, child := range j.Unwrap() {
				collectAttempts(child, out)
			}
			return
		}
		u, ok := e.(interface{ Unwrap() error })
		if !ok {
			break
		}
		e = u.Unwrap()
	}
	*out = append(*out, classifyAttempt(err))
}

// classifyAttempt classifies one branch: a chain of errors without joins.
func classifyAttempt(err error) attempt {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		r := pgErr.Error()
		if pgErr.Hint != "" {
			r += " (hint: " + pgErr.Hint + ")"
		}
		return attempt{permanent: connectPermanent(pgErr.Code), server: true, reason: r}
	}
	text := err.Error()
	if ce := (*pgconn.ConnectError)(nil); errors.As(err, &ce) {
		// A branch that is the whole ConnectError (no join inside): drop the
		// "failed to connect to `user=… database=…`:" prefix, added once
		// by the caller.
		if _, after, ok := strings.Cut(text, "`:"); ok {
			text = strings.TrimSpace(after)
		}
	}
	switch {
	case errors.Is(err, context.Canceled):
		return attempt{reason: text}
	case errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err) || isNetTimeout(err):
		return attempt{reason: text}
	case isTLSFailure(err):
		return attempt{permanent: true, reason: text}
	case errors.As(err, new(*pgconn.ParseConfigError)):
		return attempt{permanent: true, reason: "invalid connection settings"} // its text may quote the connection string
	}
	for _, m := range permanentClientFailures {
		if strings.Contains(text, m) {
			return attempt{permanent: true, reason: text}
		}
	}
	return attempt{reason: text}
}

// connectPermanent reports whether a server error with this SQLSTATE, met
// while connecting, will recur however often the connection is retried. It
// is sqlStateKind's Permanent (28 authorization: no such role, a wrong
// password, no pg_hba.conf entry; 3D no such database; 3F; 42 no CONNECT
// privilege, an unknown setting in the connection string; 0A an
// unsupported feature such as the protocol version) with three differences,
// all because the server has read no statement and no row yet, only the
// connection's settings:
//
//   - class 22 (data_exception) is a setting's bad value (22023
//     invalid_parameter_value), not a row's data: permanent, where a
//     statement's is a DataError;
//   - 08P01 (protocol_violation) is a startup parameter the server does
//     not support: permanent, where during a session it is the connection
//     breaking (transient);
//   - 55000 (object_not_in_prerequisite_state) is a database not accepting
//     connections (datallowconn false): permanent, where a statement's is
//     transient.
//
// XX001/XX002 cannot be a row's fault at connect time and stay transient
// there, with the rest of 08 (connection exception), 53 (insufficient
// resources, too many connections), 57 (cannot connect now, shutdown), 58,
// XX and anything else: the server or the network may recover.
func connectPermanent(code string) bool {
	switch {
	case code == "08P01", code == "55000", strings.HasPrefix(code, "22"):
		return true
	}
	return sqlStateKind(code) == Permanent
}

// permanentClientFailures are pgconn's messages for connection attempts that
// failed on the client side because the settings and the server disagree.
var permanentClientFailures = []string{
	"server refused TLS connection", // sslmode=require/verify-* against a server without TLS
	"require_auth check failed",
	"invalid require_auth",
	"channel binding check failed",
	"channel binding required",
	"sslcertmode check failed",
	"invalid sslcertmode",
	"failed SASL auth",
	"failed GSS auth",
	"invalid min_protocol_version",
	"invalid max_protocol_version",
	"server protocol version too low",
}

// isTLSFailure reports a TLS handshake that failed for a reason of
// configuration: the certificate, the server's alert, or a server that does
// not speak TLS.
func isTLSFailure(err error) bool {
	var (
		unknownAuthority x509.UnknownAuthorityError
		hostname         x509.HostnameError
		invalid          x509.CertificateInvalidError
		verification     *tls.CertificateVerificationError
		alert            tls.AlertError
		record           tls.RecordHeaderError
	)
	return errors.As(err, &unknownAuthority) || errors.As(err, &hostname) || errors.As(err, &invalid) ||
		errors.As(err, &verification) || errors.As(err, &alert) || errors.As(err, &record)
}

func isNetTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// appendNew appends s to list unless it is there already.
func appendNew(list []string, s string) []string {
	for _, have := range list {
		if have == s {
			return list
		}
	}
	return append(list, s)
}

// joinLines joins the lines of s with "; ".
func joinLines(s string) string {
	var parts []string
	for _, p := range strings.Split(s, "\n") {
		if p = strings.TrimSpace(p); p != "" {
			parts = append(parts, p)
		}
	}
	return strings.Join(parts, "; ")
}
