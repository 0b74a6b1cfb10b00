package postgres

import (
	"context"
	"errors"
	"fmt"
	"net/url"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/channels-dev/channels/taskplane/store"
)

func init() {
	store.RegisterInspector("postgres", Inspect)
	store.RegisterInspector("postgresql", Inspect)
}

// Inspect connects to the database named by u on one connection, pings it and reads the schema
// version of the first schema of the connection's search_path (where Open would migrate), and
// changes nothing: no migration, no lock, no table created. A store is there (Exists) once the
// database answers; its Version is 0 until Open has migrated it. Errors never contain the
// password.
func Inspect(ctx context.Context, u *url.URL) (store.Inspection, error) {
	ms, err := migrations()
	if err != nil {
		return store.Inspection{}, err
	}
	in := store.Inspection{Latest: ms[len(ms)-1].Version}
	// The pool's parser, so that the pool settings a store URL may carry are not sent to the
	// server as run-time parameters.
	cfg, err := pgxpool.ParseConfig(u.String())
	if err != nil {
		return in, errors.New("postgres: invalid connection URL")
	}
	setSessionDefaults(cfg.ConnConfig.RuntimeParams)
	conn, err := pgx.ConnectConfig(ctx, cfg.ConnConfig)
	if err != nil {
		return in, fmt.Errorf("postgres: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := conn.Ping(ctx); err != nil {
		return in, fmt.Errorf("postgres: connect: %w", err)
	}
	in.Exists = true
	var schema *string
	if err := conn.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		return in, fmt.Errorf("postgres: current schema: %w", err)
	}
	if schema == nil {
		return in, errors.New("postgres: the search_path names no existing schema to create tables in")
	}
	var table *string
	if err := conn.QueryRow(ctx, `SELECT to_regclass(quote_ident($1) || '.schema_migrations')::text`, *schema).Scan(&table); err != nil {
		return in, fmt.Errorf("postgres: read schema_migrations: %w", err)
	}
	if table != nil {
		if err := conn.QueryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM `+pgx.Identifier{*schema, "schema_migrations"}.Sanitize()).Scan(&in.Version); err != nil {
			return in, fmt.Errorf("postgres: read schema_migrations: %w", err)
		}
	}
	if in.Version < in.Latest {
		// Open creates or migrates the schema: the role must be allowed to create in it.
		var create bool
		if err := conn.QueryRow(ctx, `SELECT has_schema_privilege(current_schema(), 'CREATE')`).Scan(&create); err != nil {
			return in, fmt.Errorf("postgres: read privileges: %w", err)
		}
		if !create {
			return in, fmt.Errorf("postgres: the role may not create tables in schema %q, so the store's schema cannot be created or migrated (GRANT CREATE ON SCHEMA %s TO the role)", *schema, pgx.Identifier{*schema}.Sanitize())
		}
	}
	return in, nil
}
