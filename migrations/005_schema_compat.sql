-- 005: what each applied migration keeps compatible with, so that a binary
-- older than the schema (after an image rollback, say) can tell whether it
-- may run: `inboxd migrate` writes one row per applied migration with the
-- oldest schema version whose binaries keep working on it (the
-- `inboxd:oldest-compatible-schema` line of each migration file).
-- inboxd:oldest-compatible-schema 1
CREATE TABLE IF NOT EXISTS inboxd_schema_compat (
    version           integer PRIMARY KEY,
    oldest_compatible integer NOT NULL
);

---- create above / drop below ----

DROP TABLE inboxd_schema_compat;
