-- Dead-letter one row whose claim fails because of its data, so that it
-- stops blocking every other row. It does not touch attempts or any other
-- column a broken value might live in.
UPDATE inbox
SET status     = 'dead',
    last_error = @reason,
    started    = false,
    updated_at = now()
WHERE id = @id
  AND status = 'received'
