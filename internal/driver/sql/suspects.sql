-- Which of the rows just claimed (@ids, those attempted before) were last
-- returned by the rescuer after a started attempt: their last_error begins
-- with the rescuer's @expired_prefix (sql/rescue.sql). Such a row may be
-- the one whose handler killed its worker; the pool runs them one at a time
-- (see suspect in job.go). Reads the rows by primary key; locks nothing.
SELECT id
FROM inbox
WHERE id = ANY (@ids::bigint[])
  AND starts_with(last_error, @expired_prefix::text)
