-- Mark one row processed inside a transactional handler's transaction,
-- fenced by its lease token. Run first, so the row is locked while the
-- handler writes; zero rows affected means the lease was lost.
-- Fenced by the lease token alone, as in complete.sql (see there why).
UPDATE inbox
SET status           = 'processed',
    processed_at     = now(),
    lease_token      = NULL,
    lease_expires_at = NULL,
    locked_by        = NULL,
    updated_at       = now()
WHERE id = $1
  AND lease_token = $2
