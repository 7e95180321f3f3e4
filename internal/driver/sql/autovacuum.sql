-- Whether autovacuum will vacuum the inbox: the server's autovacuum
-- setting, and the table's autovacuum_enabled storage parameter (true when
-- unset; migrations/007_inbox_autovacuum.sql tunes the others). Every event
-- leaves dead row versions behind: without vacuum the table and its indexes
-- grow and claims slow down.
-- Reads the catalog only (pg_class), not the table.
SELECT current_setting('autovacuum')::boolean,
       coalesce((SELECT option_value::boolean
                 FROM pg_class AS c, pg_options_to_table(c.reloptions)
                 WHERE c.oid = to_regclass('inbox') AND option_name = 'autovacuum_enabled'), true)
