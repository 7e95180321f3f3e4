---- tern: disable-tx ----
-- 021: the index of the operators' search by error text (`--error`, the
-- console's "error" filter: a case-insensitive substring of last_error). A
-- text that matched no row read every row of its status (3.2 s over the
-- 100,000 dead rows of a ten-million-row inbox); a pg_trgm GIN index on
-- lower(last_error) finds the rows holding the text's trigrams instead
-- (docs/operations.md, "Searching by error text"). It holds only rows with
-- an error (retrying, dead, rejected, cancelled ones): a row processed at
-- its first attempt adds no entry, so the happy path writes nothing more;
-- a failed attempt writes its text's trigrams (about 2.7 times the
-- update's cost in a loop of such updates: docs/operations.md).
--
-- pg_trgm is an extension: created here when the migrating role may
-- (a superuser, or the database's owner: pg_trgm is trusted), otherwise by
-- the administrator beforehand (deploy/sql/roles.sql does). Without it
-- nothing is built and the search reads the rows as before; build the
-- index later with `SELECT inboxd_error_index_builds() \gexec` in psql
-- once the extension exists.
--
-- Built CONCURRENTLY: claims, completions and ingest go on meanwhile. On a
-- partitioned inbox (`inboxd partitions convert`), where CONCURRENTLY
-- cannot build an index of the parent, the parent's index is created
-- empty (ON ONLY), each partition's built CONCURRENTLY and attached; the
-- partitions created later get theirs when attached. The statements come
-- from inboxd_error_index_builds() and each is safe to run again.
-- Expand only: binaries of schemas 1 to 20 never read the index.
-- inboxd:oldest-compatible-schema 1

DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_extension WHERE extname = 'pg_trgm') THEN
        CREATE EXTENSION pg_trgm;
    END IF;
EXCEPTION WHEN insufficient_privilege OR undefined_file OR undefined_object OR feature_not_supported THEN
    RAISE NOTICE 'inboxd: pg_trgm is not installed (%): the search by error text works without its index', SQLERRM;
END
$$;

-- The statements that build the error text's index on the inbox as it is
-- (plain or partitioned); none without pg_trgm, none once it is built.
CREATE OR REPLACE FUNCTION inboxd_error_index_builds() RETURNS SETOF text
LANGUAGE plpgsql STABLE AS $$
DECLARE
    ops text;
    part text;
    idx text;
BEGIN
    SELECT format('%I.gin_trgm_ops', n.nspname) INTO ops
    FROM pg_opclass c
    JOIN pg_namespace n ON n.oid = c.opcnamespace
    JOIN pg_am a ON a.oid = c.opcmethod
    WHERE c.opcname = 'gin_trgm_ops' AND a.amname = 'gin'
    LIMIT 1;
    IF ops IS NULL OR to_regclass('inbox') IS NULL THEN
        RETURN;
    END IF;
    IF (SELECT relkind FROM pg_class WHERE oid = to_regclass('inbox')) <> 'p' THEN
        IF to_regclass('inbox_error_trgm_idx') IS NULL THEN
            RETURN NEXT format('CREATE INDEX CONCURRENTLY IF NOT EXISTS inbox_error_trgm_idx ON inbox '
                               'USING gin (lower(last_error) %s) WHERE last_error IS NOT NULL', ops);
        END IF;
        RETURN;
    END IF;
    RETURN NEXT format('CREATE INDEX IF NOT EXISTS inbox_error_trgm_idx ON ONLY inbox '
                       'USING gin (lower(last_error) %s) WHERE last_error IS NOT NULL', ops);
    FOR part IN SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                WHERE i.inhparent = to_regclass('inbox') AND NOT i.inhdetachpending ORDER BY 1
    LOOP
        -- A partition attached since the parent's index exists has its own.
        CONTINUE WHEN EXISTS (SELECT FROM pg_inherits ii JOIN pg_index x ON x.indexrelid = ii.inhrelid
                              WHERE ii.inhparent = to_regclass('inbox_error_trgm_idx') AND x.indrelid = to_regclass(part));
        idx := left(part || '_inbox_error_trgm_idx', 63);
        RETURN NEXT format('CREATE INDEX CONCURRENTLY IF NOT EXISTS %I ON %I '
                           'USING gin (lower(last_error) %s) WHERE last_error IS NOT NULL', idx, part, ops);
        RETURN NEXT format('ALTER INDEX inbox_error_trgm_idx ATTACH PARTITION %I', idx);
    END LOOP;
END
$$;

-- inboxd:run-each-row
SELECT inboxd_error_index_builds();

---- create above / drop below ----

DROP INDEX IF EXISTS inbox_error_trgm_idx;
DROP FUNCTION IF EXISTS inboxd_error_index_builds();
