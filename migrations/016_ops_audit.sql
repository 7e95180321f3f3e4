-- 016: the operators' audit trail (internal/ops). Every action an operator
-- takes from the CLI or the console is one row: who (operator), from
-- where (origin: "cli user@host", "console 192.0.2.1"), what (action:
-- requeue, discard, cancel, retry_now, pause, resume, sign_in, sign_out,
-- ...), on which rows (filter, as JSON, and row_ids, the first ids
-- changed or matched), how many (row_count), dry run or not, and how it
-- ended (error, NULL when it succeeded). A bulk action is one row with its
-- filter and count, never a row per inbox row.
--
-- Append-only: the runtime role may SELECT and INSERT it, nothing else
-- (deploy/sql/roles.sql), and the trigger below refuses UPDATE, DELETE and
-- TRUNCATE whoever asks (the migrator included), so that a single-role
-- deployment keeps the record too. Its id orders it; the console and
-- `inboxd audit` page it by id, newest first.
--
-- Expand only: binaries of schemas 1 to 15 do not know the table.
-- inboxd:oldest-compatible-schema 1
CREATE TABLE IF NOT EXISTS ops_audit (
    id        bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at        timestamptz NOT NULL DEFAULT now(),
    operator  text        NOT NULL,
    origin    text        NOT NULL DEFAULT '',
    action    text        NOT NULL,
    dry_run   boolean     NOT NULL DEFAULT false,
    filter    jsonb       NOT NULL DEFAULT '{}'::jsonb,
    row_ids   bigint[],
    row_count bigint      NOT NULL DEFAULT 0,
    detail    text        NOT NULL DEFAULT '',
    error     text,
    CONSTRAINT ops_audit_operator_check CHECK (operator <> ''),
    CONSTRAINT ops_audit_action_check CHECK (action <> '')
);

CREATE OR REPLACE FUNCTION ops_audit_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'ops_audit is append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END
$$;

CREATE TRIGGER ops_audit_append_only
    BEFORE UPDATE OR DELETE ON ops_audit
    FOR EACH ROW EXECUTE FUNCTION ops_audit_append_only();
CREATE TRIGGER ops_audit_no_truncate
    BEFORE TRUNCATE ON ops_audit
    FOR EACH STATEMENT EXECUTE FUNCTION ops_audit_append_only();

---- create above / drop below ----

DROP TABLE IF EXISTS ops_audit;
DROP FUNCTION IF EXISTS ops_audit_append_only();
