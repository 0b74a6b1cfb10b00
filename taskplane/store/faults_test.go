package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/channels-dev/channels/taskplane/store"
)

// sqliteError has the method of modernc.org/sqlite's error that the store reads.
type sqliteError int

func (e sqliteError) Error() string { return fmt.Sprintf("sqlite error %d", int(e)) }
func (e sqliteError) Code() int     { return int(e) }

func lite(code int) error { return fmt.Errorf("insert claim: %w", sqliteError(code)) }

func TestStorageFaultAndUnavailable(t *testing.T) {
	pg := func(code string) error {
		return fmt.Errorf("insert claim: %w", &pgconn.PgError{Severity: "ERROR", Code: code})
	}
	for _, c := range []struct {
		name               string
		err                error
		fault, unavailable bool
	}{
		{"disk full", pg("53100"), true, true},
		{"I/O", pg("58030"), true, true},
		{"read-only", pg("25006"), true, true},
		{"admin shutdown", pg("57P01"), false, true},
		{"starting up", pg("57P03"), false, true},
		{"connection failure", pg("08006"), false, true},
		{"unique violation", pg("23505"), false, false},
		{"division by zero", pg("22012"), false, false},
		{"not found", fmt.Errorf("get task: %w", store.ErrNotFound), false, false},
		{"cancelled", context.Canceled, false, false},
		{"sqlite busy", lite(5), false, true},
		{"sqlite busy snapshot", lite(5 | 2<<8), false, true},
		{"sqlite locked", lite(6), false, true},
		{"sqlite full", lite(13), true, true},
		{"sqlite corrupt", lite(11), true, true},
		{"sqlite I/O fsync", lite(10 | 4<<8), true, true},
		{"sqlite constraint", lite(19 | 8<<8), false, false},
		{"another", errors.New("boom"), false, false},
		{"nil", nil, false, false},
	} {
		if got := store.StorageFault(c.err); got != c.fault {
			t.Errorf("%s: StorageFault(%v) = %v, want %v", c.name, c.err, got, c.fault)
		}
		if got := store.Unavailable(c.err); got != c.unavailable {
			t.Errorf("%s: Unavailable(%v) = %v, want %v", c.name, c.err, got, c.unavailable)
		}
	}
}
