-- 017: a history per row (internal/ops, `inboxd show`, the console's
-- timeline): each attempt's start, end, worker, outcome and error, for the
-- last 25 attempts of a row. The engine writes an attempt only when it
-- failed (a retry or a death; a lease that expired during it: 'lease
-- expired') or when it finished a row that had failed before (attempt >
-- 1): a row processed at its first attempt writes nothing here (its one
-- attempt is the row itself: received_at, processed_at), so the happy path
-- costs no statement more. Each entry is written by the statement (or the
-- transaction) that writes its outcome: the completion batch's, a
-- transactional handler's, the rescue's, or the claim that takes a lapsed
-- reservation (sql/attempts_record.sql). The entries of rows that are
-- gone (retention, a discard) are swept by the maintenance's rollup
-- service, oldest first by finished_at; a row's entries stay as long as
-- the row.
--
-- No foreign key to inbox: an inbox row may be deleted (retention, a
-- discard) while its history is written.
--
-- Expand only: binaries of schemas 1 to 16 do not know the table.
-- inboxd:oldest-compatible-schema 1
CREATE TABLE IF NOT EXISTS inbox_attempts (
    row_id      bigint      NOT NULL,
    attempt     integer     NOT NULL,
    started_at  timestamptz NOT NULL,
    finished_at timestamptz NOT NULL,
    worker      text        NOT NULL DEFAULT '',
    outcome     text        NOT NULL,
    error       text,
    PRIMARY KEY (row_id, attempt),
    CONSTRAINT inbox_attempts_outcome_check CHECK (outcome IN ('processed', 'retried', 'dead', 'lease expired'))
);

CREATE INDEX IF NOT EXISTS inbox_attempts_finished_idx ON inbox_attempts (finished_at);

---- create above / drop below ----

DROP TABLE IF EXISTS inbox_attempts;
