/*
 * ordered.pml: an ordered route's key. Three rows of one (source, key),
 * ids 1 < 2 < 3 as the sequence gave them at insert; rows 2 and 3 are
 * committed, row 1's SQL producer commits at any time (a late commit: the
 * lower id visible after rows of its key ran) or never; two workers, the
 * rescuer, and a crash.
 *
 * A claim (claim.sql's ordered part, with holds_key.sql's rules) takes a
 * key's head only when no earlier row of its key is unfinished (received
 * or processing, or dead on a route whose dead rows block: on_dead block)
 * and no row of its key is processing, whatever its id (runs_key); it
 * takes the next row of the key with it (a chain of one); it parks the
 * rows it reads behind a received or dead row (available_at 9999-12-31).
 * The worker runs the head, then the chained row once the head ended so
 * that the key may go on (processed, or dead on a route that skips), or
 * gives it back unstarted (Pool.follow). A completion that ends a row so
 * that its key goes on unparks the next row of its key
 * (unpark_successors.sql, in complete.sql), unless the worker holds that
 * row in its chain. The rescuer returns expired leases (rescue.sql) and,
 * when it moved a row to dead on a skip route, unparks what waits for
 * nothing (unpark.sql). Workers do not renew here: leases lapse, and a
 * worker that resumes after its lapse writes late, fenced.
 *
 * The route blocks its key on a dead row, or skips it: both are explored.
 * max_attempts is 1, so that a rescued started row goes dead at once.
 *
 * Each SQL statement is one indivisible step (a d_step); what the Go does
 * between two statements interleaves with everything else. (The worker
 * writes the head's outcome before it starts the chained row; in the
 * engine the completer may write it meanwhile, which no property here
 * tells apart.) The first worker claims a head with the next row of its
 * key and may die after its claim or while a handler runs; the second
 * claims a head alone and does not die (to bound the search). The clock
 * only moves forward. Every step names the SQL statement file (@sql) or
 * the Go function (@go) it stands for, or says it is the model's own
 * (@model); internal/model's tests fail when a named file or function
 * disappears.
 *
 * @protocol an ordered route's key: one claim of a key in flight, a dead head blocking its key, late-committing SQL producers
 *
 * @property P_key_order: a row's handler starts only once every earlier row of its key that its claim saw committed ended so that the key may go on (processed, or dead on a route that skips)
 * @property P_blocked: no row's handler starts while an earlier row of its key that its claim saw is dead on a route that blocks
 * @property P_one_in_flight: at most one claim of a key is in flight, whatever order the producers commit in: every processing row of the key carries one lease token
 * @property P_moves_on: once the workers stopped and the leases passed, claims and completions alone (no sweeper) finish every row that is not behind a dead row of a blocking route
 *
 * Mutations: INBOXD_MODEL_MUTATION=<n> turns mutation n on; each must
 * break the property it names (model_test.go):
 * @mutation 1 ORDER_HEAD_OFF P_key_order: claim.sql takes a row of a key whatever the rows before it (the ordered head not checked)
 * @mutation 2 HOLDS_KEY_NO_DEAD P_blocked: holds_key.sql does not count dead rows on a blocking route
 * @mutation 3 RUNS_KEY_OFF P_one_in_flight: claim.sql takes a head while a later row of its key is processing
 * @mutation 4 UNPARK_OFF P_moves_on: complete.sql does not unpark the next row of a finished key
 * @mutation 5 FOLLOW_ON_FAILURE P_key_order: Pool.follow starts the chained row even when the head failed
 * @mutation 6 RESCUE_NO_UNPARK P_moves_on: the rescuer does not unpark behind a row it moved to dead on a skip route
 */

#define N       3   /* rows of the key */
#define L       2   /* the lease, in ticks */
#define MARGIN  1   /* startMargin */
#define TMAX    3
#define FAR     20
#define PARKED  255 /* available_at 9999-12-31: parked */

hidden byte P_key_order, P_blocked, P_one_in_flight, P_moves_on;
#define PROP(name, c) assert(name || (c))

mtype = { RECEIVED, PROCESSING, PROCESSED, DEAD };
mtype = { OK, RETRY, FAIL, RELEASE };

byte mut;
#define MUT(n) (mut == n)

byte now;
bit block;                /* the route's on_dead: block (1) or skip (0) */

/* The rows, by id (index 0 unused). */
bit   c[N+1];             /* committed: visible */
mtype st[N+1];
byte  tok[N+1], exp[N+1], avail[N+1];
bit   started[N+1];
byte  ntok;

bit  dead[2];
byte alive = 2;
bit  producing = 1;

/* Ghosts. */
bit succ[N+1];            /* a handler of the row returned success */

/* holds_key.sql's holds_key: the row holds back the later rows of its key. */
#define HOLDS(e) (c[e] && (st[e] == RECEIVED || st[e] == PROCESSING || (st[e] == DEAD && block && !MUT(2))))
/* The row ended so that its key goes on. */
#define ENDED_OK(e) (succ[e] || (st[e] == DEAD && !block))

/* nearest(x, e): e is the nearest earlier row of x that holds its key (0: none). */
inline nearest_before(x, e) {
	e = x - 1;
	do
	:: e > 0 && !HOLDS(e) -> e--
	:: else -> break
	od
}
/* next_after(x, n): n is the next row after x that holds its key (0: none). */
inline next_after(x, n) {
	n = x + 1;
	do
	:: n <= N && !HOLDS(n) -> n++
	:: n > N -> n = 0; break
	:: else -> break
	od
}

/* claim.sql with its ordered part: at most one head, chained with the next
 * row of its key when chain, candidates behind a received or dead row
 * parked. Sets h, f (0: none) and the claim's token t. */
inline claim(chain) {
	h = 0; f = 0; t = 0;
	/* the head: a due received row with no earlier unfinished row and
	 * no processing row of its key after it */
	x = 1;
	do
	:: x > N -> break
	:: x <= N ->
		if
		:: c[x] && st[x] == RECEIVED && avail[x] <= now ->
			nearest_before(x, e);
			y = x + 1; q = 0;
			do
			:: y <= N -> if :: c[y] && st[y] == PROCESSING -> q = 1 :: else fi; y++
			:: else -> break
			od;
			if
			:: (e == 0 || st[e] != PROCESSING) && (q == 0 || MUT(3)) ->
				/* a candidate */
				if
				:: (e == 0 || MUT(1)) && h == 0 -> h = x
				:: else
				fi
			:: else
			fi
		:: else
		fi;
		x++
	od;
	/* the chain: the next row of the head's key, received, due or parked */
	if
	:: h != 0 && chain ->
		next_after(h, f);
		if
		:: f != 0 && st[f] == RECEIVED && (avail[f] <= now || avail[f] == PARKED) -> skip
		:: else -> f = 0
		fi
	:: else
	fi;
	/* parked: candidates right behind a received or dead row */
	x = 1;
	do
	:: x > N -> break
	:: x <= N ->
		if
		:: c[x] && st[x] == RECEIVED && avail[x] <= now && x != h && x != f ->
			nearest_before(x, e);
			y = x + 1; q = 0;
			do
			:: y <= N -> if :: c[y] && st[y] == PROCESSING -> q = 1 :: else fi; y++
			:: else -> break
			od;
			if
			:: e != 0 && (st[e] == RECEIVED || st[e] == DEAD) && (q == 0 || MUT(3)) && !MUT(1) ->
				avail[x] = PARKED
			:: else
			fi
		:: else
		fi;
		x++
	od;
	/* claimed */
	if
	:: h != 0 ->
		ntok++; t = ntok;
		st[h] = PROCESSING; tok[h] = t; exp[h] = now + L;
		if
		:: f != 0 -> st[f] = PROCESSING; tok[f] = t; exp[f] = now + L
		:: else
		fi
	:: else
	fi;
	/* one row of a key in flight: every processing row holds one claim's token */
	y = 0;
	x = 1;
	do
	:: x > N -> break
	:: x <= N ->
		if
		:: c[x] && st[x] == PROCESSING ->
			PROP(P_one_in_flight, y == 0 || tok[x] == y);
			y = tok[x]
		:: else
		fi;
		x++
	od;
	x = 0; y = 0; e = 0; q = 0
}

/* unpark_successors.sql: the next row of r's key, if parked, is due. */
inline unpark_next(r) {
	next_after(r, n);
	if
	:: n != 0 && st[n] == RECEIVED && avail[n] == PARKED -> avail[n] = now
	:: else
	fi;
	n = 0
}

/* complete.sql with its ordered part: row r's outcome out under token t,
 * fenced; a row that ends so that its key goes on unparks the next one,
 * unless chained (the worker holds it). */
inline complete(r, out, chained) {
	if
	:: tok[r] == t ->
		if
		:: out == OK -> st[r] = PROCESSED
		:: out == FAIL -> st[r] = DEAD
		:: out == RETRY -> st[r] = RECEIVED; avail[r] = now + 1
		:: out == RELEASE -> st[r] = RECEIVED; avail[r] = now
		fi;
		started[r] = 0; tok[r] = 0; exp[r] = 0;
		if
		:: (out == OK || (out == FAIL && !block)) && !chained && !MUT(4) -> unpark_next(r)
		:: else
		fi
	:: else
	fi
}

/* unpark.sql: parked rows that wait for nothing (no earlier unfinished row). */
inline unpark_all() {
	x = 1;
	do
	:: x > N -> break
	:: x <= N ->
		if
		:: c[x] && st[x] == RECEIVED && avail[x] == PARKED ->
			nearest_before(x, e);
			if :: e == 0 -> avail[x] = now :: else fi
		:: else
		fi;
		x++
	od;
	x = 0; e = 0
}

/* rescue.sql and rescue_delay.sql (one transaction), then unpark.sql when
 * a row went dead on a skip route: (*Rescuer).Rescue. One step here: the
 * unpark is a statement of its own, but nothing else can touch a parked
 * row meanwhile (a claim reads only due rows). */
inline rescue() {
	d_step { /* @sql rescue.sql @sql rescue_delay.sql @go (*Rescuer).rescueBatch */
		sd = 0;
		x = 1;
		do
		:: x > N -> break
		:: x <= N ->
			if
			:: c[x] && st[x] == PROCESSING && exp[x] < now ->
				if
				:: started[x] -> st[x] = DEAD; sd = sd || !block /* max_attempts 1 */
				:: else -> st[x] = RECEIVED; avail[x] = now /* its attempt refunded */
				fi;
				started[x] = 0; tok[x] = 0; exp[x] = 0
			:: else
			fi;
			x++
		od;
		x = 0;
		/* @sql unpark.sql @go (*Rescuer).Rescue */
		if
		:: sd && !MUT(6) -> unpark_all()
		:: else
		fi;
		sd = 0
	}
}

/* At the start of row r's handler, on a claim that saw the rows of cm
 * committed: no earlier row it saw blocks the key (dead on a blocking
 * route, never succeeded), and each ended so that the key goes on. */
inline starts(r) {
	x = 1;
	do
	:: x >= r -> break
	:: x < r ->
		if
		:: cm & (1 << x) ->
			PROP(P_blocked, !(st[x] == DEAD && block && !succ[x]));
			PROP(P_key_order, ENDED_OK(x))
		:: else
		fi;
		x++
	od;
	x = 0;
	started[r] = 1 /* its start recorded first (claim.sql, or mark_starts.sql) */
}

/* The handler of row r returns: its verdict, or the worker dies meanwhile. */
inline returns(r, o) {
	atomic { /* @go (*executor).execute: the handler returns */
		if
		:: o = OK; succ[r] = 1
		:: o = RETRY
		:: o = FAIL
		:: w == 0 -> goto crash
		fi
	}
}

/* Worker 0 claims a head with the next row of its key (a chain) and may
 * die; worker 1 claims heads alone. */
proctype Worker(byte w) {
	byte h, f, t, x, y, e, q, n, sent, cm;
	mtype out, fout;
	d_step { /* @go (*claimer).claim */
		sent = now
	};
	d_step { /* @sql claim.sql @sql holds_key.sql */
		claim(w == 0);
		cm = 0;
		x = 1;
		do
		:: x > N -> break
		:: x <= N -> if :: c[x] -> cm = cm | (1 << x) :: else fi; x++
		od;
		x = 0;
		if :: h == 0 -> sent = 0; cm = 0 :: else fi
	};
	if
	:: h == 0 -> goto stop
	:: h != 0 && w == 0 -> goto crash /* it dies before the handler starts */
	:: h != 0
	fi;
	/* @go (*books).dispatchLocked: the head at risk (the chain given back with it), or started */
	if
	:: now + MARGIN > sent + L ->
		d_step { /* @sql complete.sql */
			complete(h, RELEASE, 0);
			if :: f != 0 -> complete(f, RELEASE, 0) :: else fi
		};
		goto stop
	:: else -> d_step { /* @go (*executor).execute */ starts(h) }
	fi;
	returns(h, out);
	/* @go (*books).follow: the chained row goes on only if the key may;
	 * the head's completion then leaves it parked or not as it is */
	d_step { /* @sql complete.sql @sql unpark_successors.sql */
		complete(h, out, f != 0)
	};
	if
	:: f == 0 -> goto stop
	:: f != 0 && (out == OK || (out == FAIL && !block) || MUT(5)) ->
		if
		:: now + MARGIN > sent + L -> fout = RELEASE /* @go (*books).dispatchLocked: at risk */
		:: else ->
			d_step { /* @go (*executor).execute */ starts(f) };
			returns(f, fout)
		fi
	:: else -> fout = RELEASE /* given back unstarted */
	fi;
	d_step { /* @sql complete.sql @sql unpark_successors.sql */
		complete(f, fout, 0)
	};
stop:	skip;
	d_step { /* @model: the worker stops */ dead[w] = 1; alive--; h = 0; f = 0; t = 0; out = 0; fout = 0; sent = 0; cm = 0 };
	goto end;
crash:	skip;
	d_step { /* @model: the worker dies */ dead[w] = 1; alive--; h = 0; f = 0; t = 0; out = 0; fout = 0; sent = 0; cm = 0 };
end:	skip
}

/* SQL producers: rows 2 and 3 are committed; row 1's transaction (its id
 * drawn first) commits at any time, after rows of its key ran, or never
 * (rolled back, or still open at the end). */
proctype Producers() {
	if
	:: c[1] = 1
	:: skip
	fi;
	producing = 0
}

proctype Rescuer() {
	byte x, e, n;
	bit sd;
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

/* Once the workers and producers stopped: past every lease, a rescue,
 * then claims that succeed, one row at a time, until none is due. Every
 * committed row is then done, or behind a dead row of a blocking route. */
proctype Drain() {
	byte h, f, t, x, y, e, q, n;
	bit sd;
	alive == 0 && !producing;
	now = FAR;
	rescue();
	do
	:: d_step { /* @sql claim.sql */ claim(0) };
		if
		:: h == 0 -> break
		:: else -> d_step { /* @sql complete.sql */ succ[h] = 1; complete(h, OK, 0) }
		fi
	od;
	skip;
	d_step { /* @model: the check */
		x = 1;
		do
		:: x > N -> break
		:: x <= N ->
			if
			:: c[x] ->
				e = 1; q = 0;
				do
				:: e < x -> if :: c[e] && st[e] == DEAD && block -> q = 1 :: else fi; e++
				:: else -> break
				od;
				PROP(P_moves_on, st[x] == PROCESSED || st[x] == DEAD || q)
			:: else
			fi;
			x++
		od
	}
}

init {
	c_code { /* @model: the mutation this run checks */ char *m = getenv("INBOXD_MODEL_MUTATION"); now.mut = m ? atoi(m) : 0; };
	atomic { /* @model: the processes */
		st[1] = RECEIVED; st[2] = RECEIVED; st[3] = RECEIVED;
		c[2] = 1; c[3] = 1;
		if :: block = 1 :: block = 0 fi;
		run Clock();
		run Producers();
		run Rescuer();
		run Worker(0);
		run Worker(1);
		run Drain()
	}
}
