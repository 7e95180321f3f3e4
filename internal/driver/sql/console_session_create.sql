-- Start a console session (a sign-in): one row by its primary key.
INSERT INTO console_sessions (id_hash, operator, token_tag, expires_at)
VALUES (@id_hash, @operator, @token_tag, @expires_at)
