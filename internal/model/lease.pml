/*
 * lease.pml: claim, lease, renewal, completion fenced by the token, and
 * rescue. One inbox row, two workers, the rescuer.
 *
 * A claim gives the row to a worker under a fresh lease token and a lease
 * (claim.sql); the worker renews the lease while it holds the row
 * (renew.sql), records the start of the handler before it runs (the
 * claim's started flag for a row an idle handler takes at once, else the
 * claim's start bits: mark_starts.sql), and writes the outcome fenced by
 * the token (complete.sql, or complete_tx.sql in a transactional
 * handler's transaction). The rescuer returns a row whose lease expired
 * (rescue.sql and rescue_delay.sql, one transaction).
 *
 * Each SQL statement is one indivisible step (a d_step), as PostgreSQL
 * runs it; what the Go does between two statements interleaves with
 * everything else, and so does the time a statement takes to reach the
 * database and its reply to come back. A worker may simply not be
 * scheduled while the clock runs (a pause past its lease), then resume at
 * the step it was at; the first worker may also die after any step (a
 * statement it sent still runs). The clock only moves forward.
 *
 * The second worker is the first one's peer: it claims, runs and writes,
 * but neither dies, renews, nor waits in a queue (to bound the search:
 * the workers are symmetric, and whatever it would do the first one does).
 *
 * Every step names the SQL statement file of internal/driver/sql (@sql) or
 * the Go function (@go) it stands for, or says it is the model's own
 * (@model); internal/model's tests fail when a named file or function
 * disappears.
 *
 * @protocol claim, lease, renewal, completion fenced by the token, and rescue: a lease lapsing while the handler runs, a worker writing late
 *
 * @property P_one_holder: no two workers hold a live lease on the row at once, each by its own clock (a claim takes the row only once the lease before it ended)
 * @property P_fenced: a completion or a renewal is applied only under the row's current lease token
 * @property P_once: a transactional handler's writes commit at most once, and exactly once for a processed row
 * @property P_kill_costs: a rescued row whose handler started under its lease keeps the attempt (a handler that kills its worker costs its row an attempt)
 * @property P_unstarted_free: a rescued row whose start was never recorded gets its attempt back
 * @property P_comes_back: once every worker stopped and the leases passed, the row is processed, dead, or due for the next claim
 *
 * Mutations: INBOXD_MODEL_MUTATION=<n> turns mutation n on (one compiled
 * checker runs them all); each must break the property it names, which
 * model_test.go checks:
 * @mutation 1 FENCE_OFF P_fenced: complete.sql without its lease-token fence
 * @mutation 2 RENEW_UNFENCED P_fenced: renew.sql without its lease-token fence
 * @mutation 3 TX_FENCE_OFF P_once: complete_tx.sql without its lease-token fence
 * @mutation 4 LEASE_FROM_REPLY P_one_holder: the worker counts its lease from the claim's reply, not from before the statement was sent
 * @mutation 5 RESCUE_LIVE P_one_holder: rescue.sql takes leases that have not expired
 * @mutation 6 RESCUE_NO_REFUND P_unstarted_free: rescue.sql keeps the attempt of a row whose start was never recorded
 * @mutation 7 RESCUE_IGNORES_BITS P_kill_costs: rescue.sql reads inbox.started only, not the claim's start bits (inbox_starts)
 * @mutation 8 MARK_AFTER_START P_kill_costs: the handler starts before its start mark is written
 * @mutation 9 RESCUE_STARTED_ONLY P_comes_back: rescue.sql takes only rows whose start was recorded
 */

#define L       3   /* the lease, in ticks of the clock */
#define MARGIN  1   /* startMargin: a third of the lease */
#define RENEW   2   /* renewThreshold: renewed with less than two thirds left */
#define TMAX    4   /* the clock stops here; the drain then jumps to FAR */
#define FAR     20
#define MAXATT  2   /* max attempts */
#define NTOK    3   /* tokens: one claim per worker, and 0 for NULL */

/* The properties; each assertion names one (hidden: not in the state). */
hidden byte P_one_holder, P_fenced, P_once, P_kill_costs, P_unstarted_free, P_comes_back;
#define PROP(name, c) assert(name || (c))

mtype = { RECEIVED, PROCESSING, PROCESSED, DEAD };
mtype = { OK, RETRY, FAIL, RELEASE };

byte now;                 /* the clock, shared */

/* The inbox row. */
mtype st = RECEIVED;
byte tok;                 /* lease_token (0: NULL) */
byte exp;                 /* lease_expires_at */
byte avail;               /* available_at */
byte att;                 /* attempts */
bit started;              /* inbox.started: the claim marked it */
bit sbit[NTOK];           /* inbox_starts: the row's start bit in claim tok's bits */
byte ntok;                /* tokens drawn */

/* Each worker's job, as the pool's books hold it. */
bit  jon[2];              /* on the books */
byte jtok[2];             /* its lease token */
byte jlu[2];              /* leaseUntil: the lease's end by the worker's clock */
bit  jlost[2];            /* cancelled: a renewal found the row fenced */
bit  dead[2];             /* the worker stopped (finished, or killed) */
byte alive = 2;           /* workers not stopped */
byte renewers = 2;        /* renewal loops not ended: a renewal sent before a crash still runs */

/* Ghosts: what happened, for the properties. */
bit  tx;                  /* the route's handler is transactional */
byte effects;             /* commits of a transactional handler's writes */
byte att0;                /* attempts before the current claim */
bit  hs;                  /* the current claim's handler started while the claim was current */

/* Worker w holds a live lease, by its clock. */
#define BELIEVES(w) (jon[w] && jlu[w] > now)
#define ONE_HOLDER PROP(P_one_holder, !(BELIEVES(0) && BELIEVES(1)))

/* The mutation switches. */
byte mut;                 /* the mutation this run checks (0: none): INBOXD_MODEL_MUTATION */
#define MUT(n) (mut == n)
#define EXPIRED        (MUT(5) || exp < now)
#define RESCUABLE      (!MUT(9) || started || sbit[tok])
#define STARTED        (started || (!MUT(7) && sbit[tok]))
#define REFUND         (!MUT(6))
/* claim.sql's predicate: a due received row */
#define CLAIMABLE(t)   (st == RECEIVED && avail <= (t))
#define COMPLETE_FENCE (MUT(1) || tok == jtok[w])
#define RENEW_FENCE    (tok == rt || (MUT(2) && st == PROCESSING))
#define TX_FENCE       (MUT(3) || tok == jtok[w])
#define LEASE_START    (MUT(4) -> now : sent)
#define MARK_AFTER     MUT(8)

/* rescue.sql, then rescue_delay.sql, in one transaction. */
inline rescue() {
	d_step { /* @sql rescue.sql @sql rescue_delay.sql @go (*Rescuer).rescueBatch */
		if
		:: st == PROCESSING && EXPIRED && RESCUABLE ->
			s = STARTED;
			if
			:: s && att >= MAXATT -> st = DEAD
			:: else -> st = RECEIVED
			fi;
			if
			:: !s && att > 0 && REFUND -> att-- /* the attempt of a row that never started */
			:: else
			fi;
			avail = now;
			if
			:: s && st == RECEIVED -> avail = now + 1 /* rescue_delay.sql: the route's backoff */
			:: else
			fi;
			PROP(P_kill_costs, !hs || att == att0 + 1);
			PROP(P_unstarted_free, started || sbit[tok] || att == att0);
			started = 0; tok = 0; exp = 0
		:: else
		fi;
		s = 0
	}
}

/* The lease renewal loop of worker w: renew.sql on the row it holds, once
 * less than RENEW of the lease is left; a fenced row's handler is
 * cancelled. */
proctype Renewer(byte w) {
	byte rs, rt;
	bit ok;
end:	do
	:: d_step { /* @go (*leaser).renew: the lease is counted from before the statement */
		jon[w] && !dead[w] && jlu[w] < now + RENEW ->
		rs = now; rt = jtok[w];
		/* @sql renew.sql */
			if
			:: RENEW_FENCE ->
				PROP(P_fenced, tok == rt);
				exp = now + L; ok = 1
			:: else
			fi
		};
		d_step { /* @go (*leaser).renew: the reply, for the job if it is still on the books */
			if
			:: jon[w] && jtok[w] == rt && !dead[w] ->
				if
				:: ok -> jlu[w] = rs + L; ONE_HOLDER
				:: else -> jlost[w] = 1
				fi
			:: else
			fi;
			rs = 0; rt = 0; ok = 0
		}
	:: dead[w] -> break
	od;
	renewers--
}

/* complete.sql: worker w's outcome out, fenced by its token; the job
 * leaves the books, written or fenced. */
inline complete(out) {
	d_step { /* @sql complete.sql @go (*completer).writeOutcomes */
		if
		:: COMPLETE_FENCE ->
			PROP(P_fenced, tok == jtok[w]);
			if
			:: out == OK -> st = PROCESSED
			:: out == FAIL -> st = DEAD
			:: out == RETRY -> st = RECEIVED; avail = now + 1
			:: out == RELEASE -> st = RECEIVED; avail = now; if :: att > 0 -> att-- :: else fi
			fi;
			started = 0; tok = 0; exp = 0
		:: else
		fi;
		jon[w] = 0
	}
}

/* A crash: the first worker may stop for good after any step; its books
 * vanish, a statement it sent still runs. */
#define CRASHPOINT if :: skip :: w == 0 -> goto crash fi

proctype Worker(byte w) {
	byte sent;
	byte got;  /* the token the claim returned (0: none) */
	mtype out;
	bit idle, cm;
	atomic { /* @go (*claimer).claim: the lease is counted from before the statement */
		sent = now;
		/* an idle handler takes the row at once (claim.sql's idle
		 * counts, inbox.started), or it waits in its route's queue */
		if :: idle = 1 :: w == 0 -> idle = 0 fi
	};
	d_step { /* @sql claim.sql */
		if
		:: CLAIMABLE(now) ->
			ntok++; tok = ntok;
			att0 = att; att++; st = PROCESSING; exp = now + L;
			started = idle; hs = 0; got = tok
		:: else -> sent = 0; idle = 0
		fi
	};
	CRASHPOINT;
	if
	:: !got -> goto stop /* the row was not due */
	:: else
	fi;
	d_step { /* @go (*claimer).claim: the reply, on the books (jobs) */
		jtok[w] = got; jon[w] = 1; jlu[w] = LEASE_START + L;
		ONE_HOLDER;
		cm = idle; idle = 0; sent = 0; got = 0
	};
	CRASHPOINT;
	/* @go (*books).dispatchLocked: fenced while queued, at risk, or started */
	if
	:: jlost[w] -> goto stop
	:: !jlost[w] && now + MARGIN > jlu[w] -> out = RELEASE; goto write
	:: !jlost[w] && now + MARGIN <= jlu[w]
	fi;
	/* @go (*leaser).markStarted */
	if
	:: cm
	:: !cm ->
		if
		:: MARK_AFTER -> d_step { /* @go (*executor).execute: the handler starts */ if :: tok == jtok[w] -> hs = 1 :: else fi }; CRASHPOINT
		:: else
		fi;
		/* @go (*leaser).writeMarks: the lease must have startMargin left */
		if
		:: jlost[w] -> goto stop
		:: !jlost[w] && now + MARGIN > jlu[w] -> out = RELEASE; goto write
		:: !jlost[w] && now + MARGIN <= jlu[w]
		fi;
		d_step { /* @sql mark_starts.sql */
			sbit[jtok[w]] = 1
		};
		CRASHPOINT
	fi;
	d_step { /* @go (*executor).execute: the handler starts */
		if :: tok == jtok[w] -> hs = 1 :: else fi; cm = 0
	};
	CRASHPOINT;
	/* ... and returns (or is cancelled by a lost lease) with its verdict */
	if
	:: out = OK
	:: out = RETRY
	:: w == 0 -> out = FAIL
	fi;
	if
	:: tx && out == OK ->
		/* @go (*executor).runTx: the fenced mark and the handler's writes commit together */
		d_step { /* @sql complete_tx.sql */
			if
			:: TX_FENCE ->
				st = PROCESSED; started = 0; tok = 0; exp = 0;
				effects++;
				PROP(P_once, effects <= 1)
			:: else /* fenced: rolled back */
			fi
		};
		if
		:: goto stop /* committed, or fenced */
		:: out = RETRY /* the commit's reply was lost: a retry, fenced if it committed */
		fi
	:: else
	fi;
	CRASHPOINT;
write:	skip;
	complete(out);
stop:	skip;
	d_step { /* @model: the worker stops */ jon[w] = 0; dead[w] = 1; alive--; out = 0; cm = 0 };
	goto end;
crash:	skip;
	d_step { /* @model: the worker dies */ jon[w] = 0; dead[w] = 1; alive--; out = 0; cm = 0; sent = 0; got = 0; idle = 0 };
end:	skip
}

proctype Rescuer() {
	bit s;
end:	do
	:: rescue()
	:: alive == 0 -> break
	od
}

proctype Clock() {
end:	do
	:: d_step { /* @model: the clock */ now < TMAX -> now++ }
	:: alive == 0 -> break
	od
}

/* Once every worker stopped and its last renewal ran: the clock passes
 * every lease, a rescuer runs, and the row must be done or due for the
 * next claim. */
proctype Drain() {
	bit s;
	alive == 0 && renewers == 0;
	now = FAR;
	rescue();
	PROP(P_comes_back, st == PROCESSED || st == DEAD || CLAIMABLE(FAR + 1));
	PROP(P_once, !tx || st != PROCESSED || effects == 1)
}

init {
	c_code { /* @model: the mutation this run checks */ char *m = getenv("INBOXD_MODEL_MUTATION"); now.mut = m ? atoi(m) : 0; };
	atomic { /* @model: the processes */
		if :: tx = 0 :: tx = 1 fi;
		run Clock();
		run Rescuer();
		run Worker(0); run Renewer(0);
		run Worker(1); renewers--;
		run Drain()
	}
}
