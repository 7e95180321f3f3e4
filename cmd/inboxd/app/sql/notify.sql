-- Wake the workers of every replica now rather than at their next poll,
-- once per requeue (the insert trigger sends the same notification). No
-- table is read.
SELECT pg_notify('inboxd_received', '')
