package driver

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// ErrorKind is what an error from a statement means for the caller.
type ErrorKind int

const (
	// Transient: the connection, the server or the context failed; the
	// same statement may succeed when retried (connection refused or
	// reset, the server restarting, too many connections, a serialization
	// failure or deadlock, a cancelled context, and anything not
	// recognised).
	Transient ErrorKind = iota
	// DataError: the server refused the statement because of a row's data
	// (SQLSTATE classes 22 data_exception and 54 program_limit_exceeded,
	// and XX001/XX002, data or index corruption). Retrying the same rows
	// fails the same way: ingest stores a rejected placeholder instead,
	// the worker isolates the row (its poison search).
	DataError
	// Permanent: a mistake in the schema, the privileges or the
	// configuration that retrying cannot fix (authentication, a missing
	// database, table or column, permission denied, a feature the server
	// lacks).
	Permanent
)

// String names the kind, for logs.
func (k ErrorKind) String() string {
	switch k {
	case DataError:
		return "data"
	case Permanent:
		return "permanent"
	default:
		return "transient"
	}
}

// Classify interprets err, returned by a statement of this package (or any
// pgx call), as one ErrorKind. nil is Transient; callers test err first.
// Errors met while connecting read a little differently: ClassifyConnect.
func Classify(err error) ErrorKind {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return Transient
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return Transient
	}
	return sqlStateKind(pgErr.Code)
}

// sqlStateKind is what a server error with this SQLSTATE means for a
// statement: the one reading of SQLSTATEs, which ClassifyConnect adapts to
// connecting (see connectPermanent).
func sqlStateKind(code string) ErrorKind {
	if len(code) < 2 {
		return Transient
	}
	switch code {
	case "XX001", "XX002": // data_corrupted, index_corrupted
		return DataError
	}
	switch code[:2] {
	case "22", "54":
		return DataError
	case "28", // invalid_authorization_specification
		"3D", // invalid_catalog_name
		"3F", // invalid_schema_name
		"42", // syntax error or access rule violation: undefined table, column, permission denied
		"0A": // feature_not_supported
		return Permanent
	}
	return Transient
}

// AsDataError returns the server's error when err is a DataError.
func AsDataError(err error) (*pgconn.PgError, bool) {
	var pgErr *pgconn.PgError
	if Classify(err) != DataError || !errors.As(err, &pgErr) {
		return nil, false
	}
	return pgErr, true
}
