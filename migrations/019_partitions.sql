-- 019: the functions of the partitioned shape (docs/inbox-table.md,
-- "Partitioned tables"). Nothing changes shape here: `inboxd partitions
-- convert` turns a live inbox (and outbox) into a table partitioned by a
-- generation, `inboxd partitions revert` turns it back, and the retention
-- of `inboxd run` creates partitions ahead, switches generations and
-- retires whole partitions (detach, drop) instead of deleting rows.
--
-- The generation of a row is the column gen, which the conversion adds
-- (the partition key); its default reads the table's current generation
-- from the sequence <table>_gen_seq (non-transactional: a REPEATABLE READ
-- writer reads the current one too). Deduplication across partitions:
-- every inbox insert holds a shared advisory lock from its row's default
-- until its transaction ends, and a switch takes it exclusively, so no
-- insert into an older partition is in flight once a newer one is
-- current; each row's BEFORE INSERT trigger then probes the other
-- partitions' unique (source, event_id, gen) indexes and skips the row if
-- its event is there (as ON CONFLICT DO NOTHING would); the current
-- partition's own unique index decides between concurrent inserts.
--
-- Expand only: binaries of schemas 1 to 18 never call these functions,
-- and work on the unpartitioned tables as before.
-- inboxd:oldest-compatible-schema 1

-- One row per partitioned table.
CREATE TABLE IF NOT EXISTS inboxd_partitioned (
    tbl         text PRIMARY KEY CHECK (tbl IN ('inbox', 'outbox')),
    -- How long a generation is current before the next one is.
    span        interval NOT NULL CHECK (span >= interval '1 second'),
    switched_at timestamptz NOT NULL DEFAULT now(),
    -- Set by `inboxd partitions revert`: no more switches; everything is
    -- carried into the current partition, which becomes the table again.
    reverting   boolean NOT NULL DEFAULT false,
    -- What the unpartitioned table had, to give it back on revert: its
    -- unique indexes (name, definition, constraint or not), its triggers,
    -- its storage parameters, how id was drawn.
    uniques     jsonb NOT NULL DEFAULT '[]',
    triggers    jsonb NOT NULL DEFAULT '[]',
    reloptions  text[],
    identity    boolean NOT NULL DEFAULT false
);

-- The current generation of the inbox, under the fence: the shared lock is
-- held until the inserting transaction ends.
CREATE OR REPLACE FUNCTION inbox_gen() RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(hashtext('inboxd.partitions.inbox'));
    RETURN (SELECT last_value FROM inbox_gen_seq);
END
$$;

-- The outbox needs no fence (its event ids are not unique).
CREATE OR REPLACE FUNCTION outbox_gen() RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RETURN (SELECT last_value FROM outbox_gen_seq);
END
$$;

-- Exact deduplication across partitions: a row whose event is in another
-- partition is skipped. Rows carried forward (inboxd.carry) are no news.
-- Its plan is cached by PL/pgSQL; planned while the newest partition is
-- nearly empty (not yet analyzed), it would scan that partition
-- sequentially for every row long after it has grown: the index probes
-- are forced (enable_seqscan off, for this function only).
CREATE OR REPLACE FUNCTION inbox_dedup_probe() RETURNS trigger
LANGUAGE plpgsql SET enable_seqscan = off AS $$
BEGIN
    IF current_setting('inboxd.carry', true) = 'on' THEN
        RETURN NEW;
    END IF;
    IF EXISTS (SELECT 1 FROM inbox WHERE source = NEW.source AND event_id = NEW.event_id AND gen <> NEW.gen) THEN
        RETURN NULL;
    END IF;
    RETURN NEW;
END
$$;

-- The partitions of p_tbl: generation, name, rows (estimated), detach pending.
CREATE OR REPLACE FUNCTION inboxd_partitions(p_tbl text)
RETURNS TABLE (gen bigint, name text, est_rows bigint, detach_pending boolean)
LANGUAGE sql STABLE AS $$
    SELECT substring(c.relname FROM '_p([0-9]+)$')::bigint, c.relname::text,
           greatest(c.reltuples, 0)::bigint, i.inhdetachpending
    FROM pg_inherits i
    JOIN pg_class c ON c.oid = i.inhrelid
    WHERE i.inhparent = to_regclass(p_tbl)
    ORDER BY 1
$$;

-- Creates and attaches partition p_gen of p_tbl (empty; no-op if it
-- exists). ATTACH takes SHARE UPDATE EXCLUSIVE on the parent: inserts,
-- claims and completions go on.
CREATE OR REPLACE FUNCTION inboxd_partition_create(p_tbl text, p_gen bigint) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    part text := format('%s_p%s', p_tbl, p_gen);
    opts text[];
    r record;
BEGIN
    IF to_regclass(part) IS NOT NULL THEN
        RETURN false;
    END IF;
    EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING ALL EXCLUDING INDEXES EXCLUDING IDENTITY)', part, p_tbl);
    EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I CHECK (gen >= %s AND gen < %s)', part, part || '_gen', p_gen, p_gen + 1);
    -- Rows come in through the parent, whose defaults apply: the
    -- partition's own would tie it to the parent's sequence.
    EXECUTE format('ALTER TABLE %I ALTER COLUMN id DROP DEFAULT, ALTER COLUMN gen DROP DEFAULT', part);
    -- The table's unique indexes kept per partition (the primary key).
    FOR r IN SELECT u.* FROM inboxd_partitioned p,
                 jsonb_to_recordset(p.uniques) AS u(name text, def text, contype text, leaf boolean)
             WHERE p.tbl = p_tbl AND u.leaf
    LOOP
        EXECUTE format('CREATE UNIQUE INDEX %I ON %I %s', left(part || '_' || r.name, 63), part,
                       regexp_replace(r.def, '^.* USING ', 'USING '));
    END LOOP;
    SELECT reloptions INTO opts FROM inboxd_partitioned WHERE tbl = p_tbl;
    IF opts IS NOT NULL AND cardinality(opts) > 0 THEN
        EXECUTE format('ALTER TABLE %I SET (%s)', part, array_to_string(opts, ', '));
    END IF;
    EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%s) TO (%s)', p_tbl, part, p_gen, p_gen + 1);
    RETURN true;
END
$$;

-- Makes p_gen the current generation of p_tbl. Takes the fence
-- exclusively: it waits for the inserts in flight (the caller sets a short
-- lock_timeout, so that inserts queued behind it never wait long).
CREATE OR REPLACE FUNCTION inboxd_partition_switch(p_tbl text, p_gen bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF to_regclass(format('%s_p%s', p_tbl, p_gen)) IS NULL THEN
        RAISE EXCEPTION 'inboxd: partition %_p% does not exist', p_tbl, p_gen;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('inboxd.partitions.' || p_tbl));
    UPDATE inboxd_partitioned SET switched_at = now() WHERE tbl = p_tbl;
    PERFORM setval(p_tbl || '_gen_seq', p_gen);
END
$$;

-- Carries at most p_limit rows of partition p_gen that a drop must not
-- reach into the current partition: dead and rejected rows, rows waiting
-- for a minute or more (parked behind their key, in backoff), and with
-- p_all (a revert) every row but those claimed or reserved (of the
-- outbox: every row; a relay's outcome for a row moved under it fails and
-- is retried, so the row may be published twice, as after a crash). A row is moved
-- (UPDATE of the partition key: delete and insert, in one transaction),
-- keeping its id. Returns how many it moved.
CREATE OR REPLACE FUNCTION inboxd_partition_carry(p_tbl text, p_gen bigint, p_all boolean, p_limit int) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    cur bigint;
    n bigint;
    part text := format('%s_p%s', p_tbl, p_gen);
BEGIN
    IF p_tbl = 'inbox' THEN
        cur := inbox_gen(); -- under the fence's shared lock
    ELSE
        cur := outbox_gen();
    END IF;
    IF cur = p_gen THEN
        RETURN 0;
    END IF;
    PERFORM set_config('inboxd.carry', 'on', true);
    IF p_tbl = 'inbox' THEN
        EXECUTE format($q$
            UPDATE inbox SET gen = $1
            WHERE gen = $2 AND id IN (
                SELECT id FROM %I
                WHERE status IN ('dead', 'rejected')
                   OR (status = 'received' AND lease_token IS NULL AND available_at > now() + interval '1 minute')
                   OR ($3 AND (status = 'processed' OR (status = 'received' AND lease_token IS NULL)))
                LIMIT $4 FOR UPDATE SKIP LOCKED)$q$, part)
        USING cur, p_gen, p_all, p_limit;
    ELSE
        EXECUTE format($q$
            UPDATE outbox SET gen = $1
            WHERE gen = $2 AND id IN (
                SELECT id FROM %I
                WHERE status = 'dead' OR ($3 AND status IN ('published', 'pending'))
                   OR (status = 'pending' AND available_at > now() + interval '1 minute')
                LIMIT $4 FOR UPDATE SKIP LOCKED)$q$, part)
        USING cur, p_gen, p_all, p_limit;
    END IF;
    GET DIAGNOSTICS n = ROW_COUNT;
    PERFORM set_config('inboxd.carry', 'off', true);
    RETURN n;
END
$$;

-- Whether every row of partition p_gen (attached or detached) may go: all
-- finished (processed, published) longer than p_retention ago. Rows that
-- must stay are carried first (inboxd_partition_carry).
CREATE OR REPLACE FUNCTION inboxd_partition_retirable(p_tbl text, p_gen bigint, p_retention interval) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    part text := format('%s_p%s', p_tbl, p_gen);
    busy boolean;
    last timestamptz;
BEGIN
    IF p_tbl = 'inbox' THEN
        EXECUTE format($q$SELECT EXISTS (SELECT 1 FROM %1$I WHERE status = 'received')
                              OR EXISTS (SELECT 1 FROM %1$I WHERE status = 'processing')
                              OR EXISTS (SELECT 1 FROM %1$I WHERE status IN ('dead', 'rejected'))$q$, part) INTO busy;
        EXECUTE format($q$SELECT max(processed_at) FROM %I WHERE status = 'processed'$q$, part) INTO last;
    ELSE
        EXECUTE format($q$SELECT EXISTS (SELECT 1 FROM %1$I WHERE status = 'pending')
                              OR EXISTS (SELECT 1 FROM %1$I WHERE status = 'dead')$q$, part) INTO busy;
        EXECUTE format($q$SELECT max(published_at) FROM %I WHERE status = 'published'$q$, part) INTO last;
    END IF;
    RETURN NOT busy AND coalesce(last, '-infinity') < now() - p_retention;
END
$$;

-- Conversion, step 1 (short ACCESS EXCLUSIVE lock, no rewrite): the
-- partition key, 0 for every row there is, and the constraint that lets
-- the table be attached as partition 0 without a scan under a lock.
CREATE OR REPLACE FUNCTION inboxd_partition_prepare(p_tbl text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('ALTER TABLE %I ADD COLUMN IF NOT EXISTS gen bigint NOT NULL DEFAULT 0', p_tbl);
    IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = to_regclass(p_tbl) AND conname = p_tbl || '_p0_gen') THEN
        EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I CHECK (gen >= 0 AND gen < 1) NOT VALID', p_tbl, p_tbl || '_p0_gen');
    END IF;
END
$$;

-- Conversion, step 2 (no lock that stops writes): the index the
-- partitioned table's deduplication key needs on partition 0, the unique
-- (source, event_id) with the partition key appended (the ON CONFLICT
-- target of ingest on the partitioned table). The table's other unique
-- indexes (the primary key) stay unique per partition as they are: a
-- partition's own unique index on id tells the planner that a lookup by
-- id finds one row, even before the partition is analyzed. Returns the statements to run, one by
-- one, outside a transaction (CREATE UNIQUE INDEX CONCURRENTLY).
CREATE OR REPLACE FUNCTION inboxd_partition_unique_builds(p_tbl text) RETURNS SETOF text
LANGUAGE sql STABLE AS $$
    SELECT format('CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS %I ON %I %s',
                  left(ic.relname, 50) || '_gen', p_tbl,
                  regexp_replace(pg_get_indexdef(ic.oid), '^.* USING (\w+) \((.*)\)$', 'USING \1 (\2, gen)'))
    FROM pg_index x JOIN pg_class ic ON ic.oid = x.indexrelid
    WHERE x.indrelid = to_regclass(p_tbl) AND x.indisunique
      AND pg_get_indexdef(ic.oid) ~ '\(source, event_id\)$'
      AND to_regclass(left(ic.relname, 50) || '_gen') IS NULL
$$;

-- Conversion, step 3, in one short transaction under ACCESS EXCLUSIVE
-- (catalogue work only, no row is read): the table becomes partition 0 of
-- a partitioned table of the same name with every index (the dedup key
-- with the partition key appended, attached from step 2's; the other
-- unique ones kept per partition) and every trigger
-- of the table as it is, id drawn from a sequence of the parent's, and
-- partition 1 current.
CREATE OR REPLACE FUNCTION inboxd_partition_swap(p_tbl text, p_span interval) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    part text := p_tbl || '_p0';
    r record;
    defs text[] := '{}';
    trigs jsonb := '[]';
    uniq jsonb := '[]';
    is_identity boolean;
    idseq text;
    opts text[];
BEGIN
    EXECUTE format('LOCK TABLE %I IN ACCESS EXCLUSIVE MODE', p_tbl);
    IF EXISTS (SELECT 1 FROM pg_class WHERE oid = to_regclass(p_tbl) AND relkind = 'p') THEN
        RETURN; -- converted already
    END IF;
    EXECUTE format('ALTER TABLE %I VALIDATE CONSTRAINT %I', p_tbl, part || '_gen');
    SELECT c.reloptions INTO opts FROM pg_class c WHERE c.oid = to_regclass(p_tbl);
    -- Indexes: the non-unique ones as they are; the unique ones (those
    -- without gen) are recorded for a revert and replaced by their "_gen"
    -- twin from step 2 (dropped from partition 0 once attached).
    FOR r IN SELECT ic.relname AS name, pg_get_indexdef(ic.oid) AS def, x.indisunique AS uniq,
                    con.contype, ic.oid AS ioid
             FROM pg_index x JOIN pg_class ic ON ic.oid = x.indexrelid
             LEFT JOIN pg_constraint con ON con.conindid = ic.oid AND con.conrelid = x.indrelid
             WHERE x.indrelid = to_regclass(p_tbl)
    LOOP
        IF r.uniq AND r.def !~ '\mgen\M' AND r.def !~ '\(source, event_id\)$' THEN
            -- Unique per partition, as it is: partition 0 keeps it.
            uniq := uniq || jsonb_build_object('name', r.name, 'def', r.def, 'contype', r.contype, 'leaf', true);
            EXECUTE format('ALTER INDEX %I RENAME TO %I', r.name, left(part || '_' || r.name, 63));
        ELSIF r.uniq AND r.def !~ '\mgen\M' THEN
            IF to_regclass(left(r.name, 50) || '_gen') IS NULL THEN
                RAISE EXCEPTION 'inboxd: index %_gen is missing (run the conversion from the start)', left(r.name, 50);
            END IF;
            uniq := uniq || jsonb_build_object('name', r.name, 'def', r.def, 'contype', r.contype, 'leaf', false);
            defs := defs || format('CREATE UNIQUE INDEX %I ON %I %s', r.name || '_p', p_tbl,
                                   regexp_replace(r.def, '^.* USING (\w+) \((.*)\)$', 'USING \1 (\2, gen)'));
        ELSIF r.def !~ '\mgen\M' THEN
            defs := defs || regexp_replace(r.def, ' ON (\S+) USING ', format(' ON %I USING ', p_tbl));
            EXECUTE format('ALTER INDEX %I RENAME TO %I', r.name, left(part || '_' || r.name, 63));
        END IF;
    END LOOP;
    -- Triggers (but for internal ones), as they are.
    FOR r IN SELECT t.tgname AS name, pg_get_triggerdef(t.oid) AS def
             FROM pg_trigger t WHERE t.tgrelid = to_regclass(p_tbl) AND NOT t.tgisinternal
    LOOP
        trigs := trigs || jsonb_build_object('name', r.name, 'def', r.def);
        EXECUTE format('DROP TRIGGER %I ON %I', r.name, p_tbl);
    END LOOP;
    -- id: an identity's sequence belongs to the old table, so the parent
    -- draws from a sequence of its own, set where the identity was.
    SELECT a.attidentity <> '' INTO is_identity FROM pg_attribute a
    WHERE a.attrelid = to_regclass(p_tbl) AND a.attname = 'id';
    idseq := pg_get_serial_sequence(p_tbl, 'id');
    EXECUTE format('ALTER TABLE %I RENAME TO %I', p_tbl, part);
    EXECUTE format('CREATE SEQUENCE IF NOT EXISTS %I', p_tbl || '_ids');
    IF idseq IS NOT NULL THEN
        PERFORM setval(p_tbl || '_ids', greatest(nextval(idseq), 1));
    END IF;
    IF is_identity THEN
        EXECUTE format('ALTER TABLE %I ALTER COLUMN id DROP IDENTITY', part);
    ELSIF idseq IS NOT NULL THEN
        EXECUTE format('ALTER TABLE %I ALTER COLUMN id DROP DEFAULT', part);
    END IF;
    EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING ALL EXCLUDING INDEXES EXCLUDING IDENTITY) PARTITION BY RANGE (gen)', p_tbl, part);
    EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', p_tbl, part || '_gen');
    EXECUTE format('ALTER TABLE %I ALTER COLUMN id SET DEFAULT nextval(%L)', p_tbl, p_tbl || '_ids');
    EXECUTE format('ALTER SEQUENCE %I OWNED BY %I.id', p_tbl || '_ids', p_tbl);
    EXECUTE format('CREATE SEQUENCE IF NOT EXISTS %I MINVALUE 0 START 0', p_tbl || '_gen_seq');
    PERFORM setval(p_tbl || '_gen_seq', 0);
    EXECUTE format('ALTER TABLE %I ALTER COLUMN gen SET DEFAULT %s_gen()', p_tbl, p_tbl);
    FOREACH idseq IN ARRAY defs LOOP
        EXECUTE idseq;
    END LOOP;
    -- The parent's unique indexes take back their names (constraints too).
    FOR r IN SELECT * FROM jsonb_to_recordset(uniq) AS u(name text, def text, contype text, leaf boolean) WHERE NOT leaf LOOP
        EXECUTE format('ALTER INDEX %I RENAME TO %I', r.name, left(part || '_' || r.name, 63));
        EXECUTE format('ALTER INDEX %I RENAME TO %I', r.name || '_p', r.name);
    END LOOP;
    EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (0) TO (1)', p_tbl, part);
    FOR r IN SELECT * FROM jsonb_to_recordset(trigs) AS t(name text, def text) LOOP
        EXECUTE r.def;
    END LOOP;
    IF p_tbl = 'inbox' THEN
        CREATE TRIGGER inbox_dedup_probe BEFORE INSERT ON inbox
            FOR EACH ROW EXECUTE FUNCTION inbox_dedup_probe();
    END IF;
    INSERT INTO inboxd_partitioned (tbl, span, uniques, triggers, reloptions, identity)
    VALUES (p_tbl, p_span, uniq, trigs, opts, coalesce(is_identity, false));
    PERFORM inboxd_partition_create(p_tbl, 1);
    PERFORM setval(p_tbl || '_gen_seq', 1);
END
$$;

-- Revert, last step, in one short transaction under ACCESS EXCLUSIVE:
-- partition p_gen, which holds every row by now (the others are empty),
-- becomes the table again, with the unique indexes, triggers and id of the
-- table before the conversion (its unique indexes were built on it
-- beforehand: inboxd_partition_revert_builds).
CREATE OR REPLACE FUNCTION inboxd_partition_unswap(p_tbl text, p_gen bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    part text := format('%s_p%s', p_tbl, p_gen);
    st inboxd_partitioned;
    r record;
    next_id bigint;
BEGIN
    EXECUTE format('LOCK TABLE %I IN ACCESS EXCLUSIVE MODE', p_tbl);
    SELECT * INTO st FROM inboxd_partitioned WHERE tbl = p_tbl;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    FOR r IN SELECT * FROM inboxd_partitions(p_tbl) LOOP
        IF r.gen <> p_gen THEN
            EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I)', r.name) INTO st.reverting;
            IF st.reverting THEN
                RAISE EXCEPTION 'inboxd: partition % still holds rows', r.name;
            END IF;
        END IF;
    END LOOP;
    next_id := nextval(p_tbl || '_ids');
    -- Index names: the partition's indexes take the parent's names.
    CREATE TEMP TABLE inboxd_index_names ON COMMIT DROP AS
        SELECT child.relname::text AS child, parent.relname::text AS parent
        FROM pg_inherits i
        JOIN pg_class child ON child.oid = i.inhrelid
        JOIN pg_class parent ON parent.oid = i.inhparent
        JOIN pg_index x ON x.indexrelid = child.oid
        WHERE x.indrelid = to_regclass(part);
    EXECUTE format('ALTER TABLE %I DETACH PARTITION %I', p_tbl, part);
    EXECUTE format('ALTER TABLE %I ALTER COLUMN id DROP DEFAULT', part);
    -- Indexes of the partition the parent did not have (partition 0's
    -- unique indexes of before the conversion): the "_r" ones replace them.
    FOR r IN SELECT ic.relname::text AS name, con.conname::text AS con
             FROM pg_index x JOIN pg_class ic ON ic.oid = x.indexrelid
             LEFT JOIN pg_constraint con ON con.conindid = ic.oid AND con.conrelid = x.indrelid
             WHERE x.indrelid = to_regclass(part)
               AND ic.relname NOT IN (SELECT child FROM inboxd_index_names)
               AND ic.relname !~ '_r$'
    LOOP
        IF r.con IS NOT NULL THEN
            EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', part, r.con);
        ELSE
            EXECUTE format('DROP INDEX %I', r.name);
        END IF;
    END LOOP;
    FOR r IN SELECT * FROM inboxd_partitions(p_tbl) LOOP
        EXECUTE format('DROP TABLE %I', r.name);
    END LOOP;
    EXECUTE format('DROP TABLE %I', p_tbl); -- its indexes, triggers, sequence _ids
    EXECUTE format('ALTER TABLE %I RENAME TO %I', part, p_tbl);
    FOR r IN SELECT * FROM inboxd_index_names LOOP
        IF to_regclass(r.parent) IS NULL THEN
            EXECUTE format('ALTER INDEX %I RENAME TO %I', r.child, r.parent);
        END IF;
    END LOOP;
    -- The unique indexes of before, built beforehand under a "_r" name;
    -- the "_gen" ones go.
    FOR r IN SELECT * FROM jsonb_to_recordset(st.uniques) AS u(name text, def text, contype text, leaf boolean) LOOP
        EXECUTE format('DROP INDEX IF EXISTS %I', r.name);
        EXECUTE format('ALTER INDEX %I RENAME TO %I', left(r.name, 50) || '_r', r.name);
        IF EXISTS (SELECT 1 FROM pg_constraint WHERE conindid = to_regclass(r.name)) THEN
            NULL; -- partition 0's own, a constraint still
        ELSIF r.contype = 'p' THEN
            EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I PRIMARY KEY USING INDEX %I', p_tbl, r.name, r.name);
        ELSIF r.contype = 'u' THEN
            EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I UNIQUE USING INDEX %I', p_tbl, r.name, r.name);
        END IF;
    END LOOP;
    EXECUTE format('ALTER TABLE %I DROP CONSTRAINT IF EXISTS %I', p_tbl, part || '_gen');
    EXECUTE format('ALTER TABLE %I DROP COLUMN gen', p_tbl);
    IF st.identity THEN
        EXECUTE format('ALTER TABLE %I ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY', p_tbl);
    ELSIF pg_get_serial_sequence(p_tbl, 'id') IS NULL THEN
        -- A serial whose sequence went with partition 0: a new one.
        EXECUTE format('CREATE SEQUENCE %I OWNED BY %I.id', p_tbl || '_id_seq_r', p_tbl);
        EXECUTE format('ALTER TABLE %I ALTER COLUMN id SET DEFAULT nextval(%L)', p_tbl, p_tbl || '_id_seq_r');
    ELSE
        -- Partition 0 survived with its serial's sequence.
        EXECUTE format('ALTER TABLE %I ALTER COLUMN id SET DEFAULT nextval(%L)', p_tbl, pg_get_serial_sequence(p_tbl, 'id'));
    END IF;
    PERFORM setval(pg_get_serial_sequence(p_tbl, 'id'), next_id);
    FOR r IN SELECT * FROM jsonb_to_recordset(st.triggers) AS t(name text, def text) LOOP
        EXECUTE r.def;
    END LOOP;
    IF st.reloptions IS NOT NULL AND cardinality(st.reloptions) > 0 THEN
        EXECUTE format('ALTER TABLE %I SET (%s)', p_tbl, array_to_string(st.reloptions, ', '));
    END IF;
    EXECUTE format('DROP SEQUENCE IF EXISTS %I', p_tbl || '_gen_seq');
    DELETE FROM inboxd_partitioned WHERE tbl = p_tbl;
END
$$;

-- Revert, before the last step: the statements (CREATE UNIQUE INDEX
-- CONCURRENTLY, one by one outside a transaction) that build the unique
-- indexes of before on partition p_gen.
-- A partition's own (the primary key, and partition 0's from before the
-- conversion) are renamed, not built again.
CREATE OR REPLACE FUNCTION inboxd_partition_revert_builds(p_tbl text, p_gen bigint) RETURNS SETOF text
LANGUAGE sql STABLE AS $$
    SELECT CASE
        WHEN to_regclass(left(format('%s_p%s_', p_tbl, p_gen) || u.name, 63)) IS NOT NULL
        THEN format('ALTER INDEX %I RENAME TO %I', left(format('%s_p%s_', p_tbl, p_gen) || u.name, 63), left(u.name, 50) || '_r')
        ELSE format('CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS %I ON %I %s',
                    left(u.name, 50) || '_r', format('%s_p%s', p_tbl, p_gen),
                    regexp_replace(u.def, '^.* USING ', 'USING '))
        END
    FROM inboxd_partitioned p, jsonb_to_recordset(p.uniques) AS u(name text, def text, contype text, leaf boolean)
    WHERE p.tbl = p_tbl AND to_regclass(left(u.name, 50) || '_r') IS NULL
$$;

---- create above / drop below ----

DROP FUNCTION IF EXISTS inboxd_partition_revert_builds(text, bigint);
DROP FUNCTION IF EXISTS inboxd_partition_unswap(text, bigint);
DROP FUNCTION IF EXISTS inboxd_partition_swap(text, interval);
DROP FUNCTION IF EXISTS inboxd_partition_unique_builds(text);
DROP FUNCTION IF EXISTS inboxd_partition_prepare(text);
DROP FUNCTION IF EXISTS inboxd_partition_retirable(text, bigint, interval);
DROP FUNCTION IF EXISTS inboxd_partition_carry(text, bigint, boolean, int);
DROP FUNCTION IF EXISTS inboxd_partition_switch(text, bigint);
DROP FUNCTION IF EXISTS inboxd_partition_create(text, bigint);
DROP FUNCTION IF EXISTS inboxd_partitions(text);
DROP FUNCTION IF EXISTS inbox_dedup_probe();
DROP FUNCTION IF EXISTS outbox_gen();
DROP FUNCTION IF EXISTS inbox_gen();
DROP TABLE IF EXISTS inboxd_partitioned;
