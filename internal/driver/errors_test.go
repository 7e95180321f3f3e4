package driver

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		err  error
		want ErrorKind
	}{
		{nil, Transient},
		{errors.New("connection reset by peer"), Transient},
		{context.Canceled, Transient},
		{fmt.Errorf("claim: %w", context.DeadlineExceeded), Transient},
		{&pgconn.PgError{Code: "22P02"}, DataError}, // invalid_text_representation
		{&pgconn.PgError{Code: "22021"}, DataError}, // character_not_in_repertoire
		{&pgconn.PgError{Code: "54000"}, DataError}, // program_limit_exceeded (row too big)
		{&pgconn.PgError{Code: "XX001"}, DataError}, // data_corrupted
		{&pgconn.PgError{Code: "XX002"}, DataError}, // index_corrupted
		{&pgconn.PgError{Code: "XX000"}, Transient}, // internal_error
		{&pgconn.PgError{Code: "40001"}, Transient}, // serialization_failure
		{&pgconn.PgError{Code: "40P01"}, Transient}, // deadlock_detected
		{&pgconn.PgError{Code: "57P01"}, Transient}, // admin_shutdown
		{&pgconn.PgError{Code: "53300"}, Transient}, // too_many_connections
		{&pgconn.PgError{Code: "42P01"}, Permanent}, // undefined_table
		{&pgconn.PgError{Code: "42501"}, Permanent}, // insufficient_privilege
		{&pgconn.PgError{Code: "28P01"}, Permanent}, // invalid_password
		{&pgconn.PgError{Code: "3D000"}, Permanent}, // invalid_catalog_name
		{fmt.Errorf("insert: %w", &pgconn.PgError{Code: "22001"}), DataError},
	} {
		if got := Classify(tt.err); got != tt.want {
			t.Errorf("Classify(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
	if _, ok := AsDataError(&pgconn.PgError{Code: "42501"}); ok {
		t.Error("AsDataError took a permission error for a data error")
	}
	if e, ok := AsDataError(fmt.Errorf("x: %w", &pgconn.PgError{Code: "22P05"})); !ok || e.Code != "22P05" {
		t.Errorf("AsDataError = %v, %v", e, ok)
	}
}
