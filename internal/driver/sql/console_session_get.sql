-- The console session of a request's cookie, unless it was ended: one
-- probe of the primary key, on every page and action. Whether it has
-- expired, and whether the credential that signed it in (token_tag) still
-- holds, is the caller's to say (its clock decided expires_at, its users
-- file or token the tag).
SELECT operator, token_tag, expires_at
FROM console_sessions
WHERE id_hash = @id_hash
  AND ended_at IS NULL
