-- Wake the workers of every replica now rather than at their next poll
-- (the insert trigger of migrations/001_inbox.sql sends the same
-- notification on the channel driver.Channel names). No table is read.
SELECT pg_notify('inboxd_received', '')
