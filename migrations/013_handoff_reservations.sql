-- 013: rows handed off at ingest. When the ingesting replica's own worker
-- pool has idle handlers, ingest inserts a batch's rows already reserved
-- for them and hands them over in memory, with no claim statement (see
-- docs/performance.md, "Hand-off at ingest"). Such a row is written as
-- every delivery is, status 'received', but with a reservation: a lease
-- token, lease_expires_at, locked_by and claim_pos as a claim would set
-- them, attempts 1 (its attempt counts from the start, since its handler
-- starts at once), and available_at at the reservation's end. Claims read
-- only due rows, so other replicas skip it while the reservation lasts; the
-- replica renews it as it renews its claimed rows (renewals move
-- available_at with the lease), and its outcome is fenced by the token
-- like a claimed row's. If that replica dies, the reservation lapses and
-- the row is an ordinary due row that any claim takes (the claim writes
-- the rescuer's "lease expired during attempt" reason, so the row is a
-- suspect as a rescued one is).
--
-- So a lease is no longer "exactly while processing": a processing row
-- always holds one, and a received row may hold one (a reservation).
-- Nothing else may: a finished row never keeps a token.
--
-- The notification trigger wakes claimers only for rows a claim can take:
-- a batch handed off entirely wakes nobody.
--
-- Expand only: binaries of schemas 1 to 12 never hand rows off; they fence
-- on the token alone, and their claims take a lapsed reservation as any
-- due row (overwriting its token).
-- inboxd:oldest-compatible-schema 1
ALTER TABLE inbox DROP CONSTRAINT IF EXISTS inbox_lease_check;
ALTER TABLE inbox ADD CONSTRAINT inbox_lease_check
    CHECK ((lease_token IS NULL) = (lease_expires_at IS NULL)
           AND (status <> 'processing' OR lease_token IS NOT NULL)
           AND (lease_token IS NULL OR status IN ('received', 'processing'))) NOT VALID;
ALTER TABLE inbox VALIDATE CONSTRAINT inbox_lease_check;

CREATE OR REPLACE FUNCTION inbox_notify_received() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM inbox_new_rows WHERE status = 'received' AND lease_token IS NULL) THEN
        PERFORM pg_notify('inboxd_received', '');
    END IF;
    RETURN NULL;
END
$$;

---- create above / drop below ----

-- Reservations become due rows (their handlers' outcomes are then fenced
-- out, as for a lapsed reservation taken by a claim).
UPDATE inbox
SET lease_token = NULL, lease_expires_at = NULL, locked_by = NULL, claim_pos = NULL,
    available_at = least(available_at, now()), updated_at = now()
WHERE status = 'received' AND lease_token IS NOT NULL;
ALTER TABLE inbox DROP CONSTRAINT IF EXISTS inbox_lease_check;
ALTER TABLE inbox ADD CONSTRAINT inbox_lease_check
    CHECK ((status = 'processing') = (lease_token IS NOT NULL AND lease_expires_at IS NOT NULL));

CREATE OR REPLACE FUNCTION inbox_notify_received() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM inbox_new_rows WHERE status = 'received') THEN
        PERFORM pg_notify('inboxd_received', '');
    END IF;
    RETURN NULL;
END
$$;
