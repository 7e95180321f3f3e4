-- Append one entry to the operators' audit trail (migration 016): who,
-- from where, what, on which rows, how many, dry run or not, how it ended.
-- Returns its id.
INSERT INTO ops_audit (operator, origin, action, dry_run, filter, row_ids, row_count, detail, error)
VALUES (@operator::text, @origin::text, @action::text, @dry_run::boolean, @filter::jsonb,
        @row_ids::bigint[], @row_count::bigint, @detail::text, @error::text)
RETURNING id, at
