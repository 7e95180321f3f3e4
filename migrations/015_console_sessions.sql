-- 015: the operator console's sessions, server-side. A sign-in writes a
-- row; the browser's cookie holds a random session id whose SHA-256 is the
-- row's key (the id itself is never stored, so a read of this table signs
-- nobody in). Every page and action looks the session up: a sign-out ends
-- it (ended_at) on every replica at once, and a session past expires_at
-- is refused. token_tag says which console token signed it in (an HMAC of
-- the token, never the token): a new token ends every session. Rows are
-- deleted some time after they expire (at sign-ins).
--
-- Built to grow: operator is the name given at sign-in; named operators
-- with roles (and an audit trail) key on it later.
--
-- Expand only: binaries of schemas 1 to 14 do not know the table (their
-- consoles sign in with a signed cookie of their own).
-- inboxd:oldest-compatible-schema 1
CREATE TABLE IF NOT EXISTS console_sessions (
    id_hash    bytea       PRIMARY KEY,
    operator   text        NOT NULL,
    token_tag  bytea       NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    ended_at   timestamptz,
    CONSTRAINT console_sessions_id_hash_check CHECK (length(id_hash) = 32)
);

---- create above / drop below ----

DROP TABLE IF EXISTS console_sessions;
