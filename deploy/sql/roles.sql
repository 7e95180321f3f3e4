-- Least-privilege PostgreSQL roles for inboxd (see docs/deployment.md, "Database roles").
--
--   migrator  runs `inboxd migrate` (INBOXD_MIGRATE_DATABASE_URL): owns every
--             table, index, sequence and function the migrations create.
--   runtime   runs `inboxd run` and the operator commands (stats, dead, show,
--             requeue, discard, prune; INBOXD_DATABASE_URL): reads and writes
--             inbox rows, reads the schema version, and nothing else. It
--             cannot create, alter or drop anything.
--
-- Run it with psql, as a superuser (or the database owner with CREATEROLE),
-- connected to the inboxd database, BEFORE the first `inboxd migrate` and
-- AGAIN AFTER every `inboxd migrate` that created tables. It is idempotent.
--
--   psql -X -d "postgres://postgres@db:5432/app" -f deploy/sql/roles.sql \
--        -v migrator=inboxd_migrator -v runtime=inboxd -v schema=public
--   inboxd migrate            # INBOXD_MIGRATE_DATABASE_URL=postgres://inboxd_migrator@db:5432/app
--   psql -X -d "postgres://postgres@db:5432/app" -f deploy/sql/roles.sql \
--        -v migrator=inboxd_migrator -v runtime=inboxd -v schema=public
--
-- Variables (all optional): migrator (default inboxd_migrator), runtime
-- (default inboxd), schema (default public; created, owned by the migrator,
-- when missing), migrator_password and runtime_password (set only when
-- given; prefer a SCRAM verifier, 'SCRAM-SHA-256$4096:…', or psql's
-- \password, so that no clear password reaches the server's logs). Roles
-- are created with LOGIN and nothing else; existing roles keep their
-- attributes.
--
-- The first run grants the runtime role, through ALTER DEFAULT PRIVILEGES,
-- SELECT, INSERT, UPDATE, DELETE on every table and USAGE on every sequence
-- the migrator will create in the schema: `inboxd migrate` then gives the
-- runtime role what `inboxd run` needs without another step. The run after
-- migrate grants the same on the tables that exist (for tables created by
-- another role) and narrows the two schema-version tables to SELECT.

\set ON_ERROR_STOP on
\if :{?migrator}
\else
\set migrator inboxd_migrator
\endif
\if :{?runtime}
\else
\set runtime inboxd
\endif
\if :{?schema}
\else
\set schema public
\endif

-- The roles: LOGIN, nothing else (no CREATEDB, CREATEROLE, SUPERUSER,
-- BYPASSRLS, nor membership in each other).
SELECT format('CREATE ROLE %I LOGIN', :'migrator')
WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'migrator') \gexec
SELECT format('CREATE ROLE %I LOGIN', :'runtime')
WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'runtime') \gexec
\if :{?migrator_password}
ALTER ROLE :"migrator" PASSWORD :'migrator_password';
\endif
\if :{?runtime_password}
ALTER ROLE :"runtime" PASSWORD :'runtime_password';
\endif

-- The schema, and where both roles look for unqualified names (the inbox
-- and the version tables are created and used unqualified).
SELECT format('CREATE SCHEMA %I AUTHORIZATION %I', :'schema', :'migrator')
WHERE NOT EXISTS (SELECT FROM pg_namespace WHERE nspname = :'schema') \gexec
SELECT format('ALTER ROLE %I IN DATABASE %I SET search_path = %I', r, current_database(), :'schema')
FROM unnest(ARRAY[:'migrator', :'runtime']) AS r \gexec

-- pg_trgm, for the index of the operators' search by error text (migration
-- 21): an extension, which neither role may create. Created in the schema,
-- when the server has it (Debian's and the official images' PostgreSQL
-- do); without it that search reads the rows instead of an index.
SELECT format('CREATE EXTENSION IF NOT EXISTS pg_trgm WITH SCHEMA %I', :'schema')
WHERE EXISTS (SELECT FROM pg_available_extensions WHERE name = 'pg_trgm') \gexec

-- Connect (PUBLIC has CONNECT by default; this keeps working if it was
-- revoked).
SELECT format('GRANT CONNECT ON DATABASE %I TO %I, %I', current_database(), :'migrator', :'runtime') \gexec

-- The migrator creates in the schema; the runtime role only uses it.
-- CREATE is revoked from PUBLIC (PostgreSQL 15's default for the public
-- schema; older servers let every role create tables there).
GRANT USAGE, CREATE ON SCHEMA :"schema" TO :"migrator";
GRANT USAGE ON SCHEMA :"schema" TO :"runtime";
REVOKE CREATE ON SCHEMA :"schema" FROM PUBLIC;
REVOKE CREATE ON SCHEMA :"schema" FROM :"runtime";
-- Left alone: PUBLIC's TEMPORARY privilege on the database, which lets
-- every role create temporary tables (inboxd never does). Revoking it
-- changes every role of the database:
--   REVOKE TEMPORARY ON DATABASE app FROM PUBLIC;

-- What the migrator creates from now on: tables readable and writable by
-- the runtime role (inbox, and any table a later migration adds or
-- rebuilds), sequences usable (identity columns). Functions keep
-- PostgreSQL's default (EXECUTE for PUBLIC); the inbox trigger's function
-- needs no grant to fire.
ALTER DEFAULT PRIVILEGES FOR ROLE :"migrator" IN SCHEMA :"schema"
    GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO :"runtime";
ALTER DEFAULT PRIVILEGES FOR ROLE :"migrator" IN SCHEMA :"schema"
    GRANT USAGE ON SEQUENCES TO :"runtime";

-- What exists already (after `inboxd migrate`): the inbox table and its
-- identity sequence, the workers' start bits (inbox_starts, schema 10), and
-- the schema-version tables and the partitioned tables' settings
-- (inboxd_partitioned, schema 19: `inboxd partitions` and the partitions'
-- maintenance, which run DDL, run as the migrator), which the runtime role
-- reads (migrations.Inspect) but never writes. (PostgreSQL does not check
-- the sequence's privileges when the identity column fills itself in;
-- USAGE keeps nextval() defaults working should a migration use one.)
SELECT format('GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE %I.inbox TO %I', :'schema', :'runtime')
WHERE to_regclass(format('%I.inbox', :'schema')) IS NOT NULL \gexec
SELECT format('GRANT USAGE ON SEQUENCE %s TO %I', pg_get_serial_sequence(format('%I.inbox', :'schema'), 'id'), :'runtime')
WHERE to_regclass(format('%I.inbox', :'schema')) IS NOT NULL \gexec
SELECT format('GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE %I.inbox_starts TO %I', :'schema', :'runtime')
WHERE to_regclass(format('%I.inbox_starts', :'schema')) IS NOT NULL \gexec
-- The outbox (schema 11): services' transactions and transactional
-- handlers insert into it, the relay reads, updates and deletes its rows and
-- leases its shards (outbox_shards, outbox_relays). The route controls
-- (schema 12): paused routes and the fleet's rate-limit buckets (schema 20
-- adds columns only: the admins' rate overrides and breaker resets). The
-- webhook sources' replay windows (schema 14, webhook_replays) and the
-- console's sessions (schema 15): sign-ins, sign-outs, expiry. The rows'
-- attempt histories (schema 17): the workers write and trim them,
-- retention deletes old ones. The per-route rollup (schema 18): every
-- replica's maintenance adds its outcomes and deletes old cells.
SELECT format('GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE %I.%I TO %I', :'schema', t, :'runtime')
FROM unnest(ARRAY['outbox', 'outbox_shards', 'outbox_relays', 'route_controls', 'route_tokens', 'webhook_replays', 'console_sessions',
                  'inbox_attempts', 'route_rollup']) AS t
WHERE to_regclass(format('%I.%I', :'schema', t)) IS NOT NULL \gexec
SELECT format('GRANT USAGE ON SEQUENCE %s TO %I', pg_get_serial_sequence(format('%I.outbox', :'schema'), 'id'), :'runtime')
WHERE to_regclass(format('%I.outbox', :'schema')) IS NOT NULL \gexec
SELECT format('REVOKE ALL ON TABLE %I.%I FROM %I', :'schema', t, :'runtime'),
       format('GRANT SELECT ON TABLE %I.%I TO %I', :'schema', t, :'runtime')
FROM unnest(ARRAY['inboxd_schema_version', 'inboxd_schema_compat', 'inboxd_partitioned']) AS t
WHERE to_regclass(format('%I.%I', :'schema', t)) IS NOT NULL \gexec
-- The operators' audit trail (schema 16) is append-only for the runtime
-- role: it reads and appends entries, and can neither change nor delete
-- one (the table's trigger refuses that to every role as well).
SELECT format('REVOKE ALL ON TABLE %I.ops_audit FROM %I', :'schema', :'runtime'),
       format('GRANT SELECT, INSERT ON TABLE %I.ops_audit TO %I', :'schema', :'runtime')
WHERE to_regclass(format('%I.ops_audit', :'schema')) IS NOT NULL \gexec
