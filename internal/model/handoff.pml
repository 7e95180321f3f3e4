/*
 * handoff.pml: the hand-off at ingest. One event, delivered by its broker
 * until a write of it is acknowledged; the replica that ingests it (R1)
 * also runs workers, another replica (R2) claims and rescues.
 *
 * R1 reserves the row for an idle handler (Pool.Reserve: a fresh lease
 * token, the lease counted from before the insert), inserts it received
 * with the reservation (insert_batch.sql: the token, lease_expires_at and
 * available_at at the lease's end, attempts 1), and once the insert has
 * committed hands the row over in memory (Pool.Deliver), where it is held
 * exactly as a claimed row: renewed (renew.sql moves available_at with the
 * lease), run, its outcome fenced by the token (complete.sql). An insert
 * whose reply is lost (it committed, or not) is cancelled (Pool.Cancel)
 * and the broker delivers the event again: a duplicate is not inserted,
 * and not handed off. A pool that stops meanwhile gives the row back
 * unstarted (Pool.giveBackHandedOff). R1 may die at any step: before the
 * insert, between the insert and the hand-over, while the handler runs.
 * Claims on R2 take the row once the reservation lapsed (claim.sql: any
 * due received row), counting one more attempt; the rescuer returns
 * expired processing rows (rescue.sql).
 *
 * Each SQL statement is one indivisible step (a d_step); what the Go does
 * between two statements interleaves with everything else. R1 may pause
 * past its lease and resume, or die after any step; R2 claims once, does
 * not renew, and does not die (to bound the search). The clock only moves
 * forward. Every step names the SQL statement file (@sql) or the Go
 * function (@go) it stands for, or says it is the model's own (@model);
 * internal/model's tests fail when a named file or function disappears.
 *
 * @protocol the hand-off at ingest: a reservation written at insert, handed over in memory, the replica dying before or after the hand-over, the reservation lapsing into a claim
 *
 * @property P_one_holder: a handed-off row is held as a claimed one: no claim takes it while its reservation lasts (no two replicas hold a live lease at once, each by its own clock)
 * @property P_fenced: the outcome of a handed-off row is applied only under the row's current lease token
 * @property P_no_dup_handoff: only a row the insert wrote is handed over: a duplicate never is
 * @property P_comes_back: once both replicas stopped and the leases passed, the event is processed, dead, due for the next claim, or (never stored) still unacknowledged at its broker
 * @property P_kill_costs: a claim that takes a lapsed reservation whose handler had started keeps the reservation's attempt
 * @property P_unstarted_free: a handed-off row given back unstarted (the pool stopping, or its lease at risk) gets its attempt back
 *
 * Mutations: INBOXD_MODEL_MUTATION=<n> turns mutation n on; each must
 * break the property it names (model_test.go):
 * @mutation 1 RENEW_KEEPS_AVAIL P_one_holder: renew.sql extends a reservation's lease but not its available_at, so its lapse does not move
 * @mutation 2 RESERVE_DUE_NOW P_one_holder: insert_batch.sql writes the reserved row due now rather than at the lease's end
 * @mutation 3 FENCE_OFF P_fenced: complete.sql without its lease-token fence
 * @mutation 4 DELIVER_DUPS P_no_dup_handoff: Pool.Deliver hands over the reserved rows whether or not the insert wrote them
 * @mutation 5 CLAIM_SKIPS_RESERVED P_comes_back: claim.sql leaves every row that carries a lease token, lapsed reservations too
 * @mutation 6 RESERVE_NO_ATTEMPT P_kill_costs: insert_batch.sql writes a reserved row with no attempt counted
 * @mutation 7 GIVEBACK_KEEPS_ATTEMPT P_unstarted_free: the rows given back unstarted keep their attempt
 */

#define L       3   /* the lease, in ticks */
#define MARGIN  1   /* startMargin */
#define RENEW   2   /* renewThreshold */
#define TMAX    4
#define FAR     20
#define MAXATT  2
#define NTOK    4   /* two reservations, one claim, and 0 for NULL */

hidden byte P_one_holder, P_fenced, P_no_dup_handoff, P_comes_back, P_kill_costs, P_unstarted_free;
#define PROP(name, c) assert(name || (c))

mtype = { ABSENT, RECEIVED, PROCESSING, PROCESSED, DEAD };
mtype = { OK, RETRY, FAIL, RELEASE };

byte mut;
#define MUT(n) (mut == n)
#define RENEW_AVAIL   (!MUT(1))
#define RESERVED_AT   (MUT(2) -> now : now + L)
#define COMPLETE_FENCE (MUT(3) || tok == jtok[w])
#define DELIVER_ANY   MUT(4)
/* claim.sql's predicate: a due received row (a lapsed reservation too) */
#define CLAIMABLE(t)  (st == RECEIVED && avail <= (t) && (!MUT(5) || tok == 0))
#define RESERVE_ATT   (MUT(6) -> 0 : 1)
#define GIVEBACK_REFUND (!MUT(7))

byte now;

/* The inbox row (ABSENT until inserted). */
mtype st = ABSENT;
byte tok, exp, avail, att;
bit started;
byte ntok;

/* The jobs on the books: 0 is R1's (handed off), 1 is R2's (claimed). */
bit  jon[2];
byte jtok[2];
byte jlu[2];
bit  jlost[2];
bit  dead[2];
byte alive = 2;
byte renewers = 1;

/* Ghosts. */
byte instok;              /* the token the insert wrote with the row */
bit  hs;                  /* R1's handler started while its reservation was current */
bit  acked;               /* ingest acknowledged the event to its broker (after the commit) */

#define BELIEVES(w) (jon[w] && jlu[w] > now)
#define ONE_HOLDER PROP(P_one_holder, !(BELIEVES(0) && BELIEVES(1)))
#define CRASHPOINT if :: skip :: goto crash fi

/* complete.sql: job w's outcome, fenced by its token. */
inline complete(out) {
	d_step { /* @sql complete.sql @go (*completer).writeOutcomes */
		if
		:: COMPLETE_FENCE ->
			PROP(P_fenced, tok == jtok[w]);
			if
			:: out == OK -> st = PROCESSED
			:: out == FAIL -> st = DEAD
			:: out == RETRY -> st = RECEIVED; avail = now + 1
			:: out == RELEASE -> st = RECEIVED; avail = now;
				if :: att > 0 && (GIVEBACK_REFUND || w != 0) -> att-- :: else fi;
				PROP(P_unstarted_free, w != 0 || att == 0)
			fi;
			started = 0; tok = 0; exp = 0
		:: else
		fi;
		jon[w] = 0
	}
}

/* rescue.sql and rescue_delay.sql, one transaction. */
inline rescue() {
	d_step { /* @sql rescue.sql @sql rescue_delay.sql @go (*Rescuer).rescueBatch */
		if
		:: st == PROCESSING && exp < now ->
			if
			:: started && att >= MAXATT -> st = DEAD
			:: else -> st = RECEIVED
			fi;
			if
			:: !started && att > 0 -> att--
			:: else
			fi;
			avail = now;
			if :: started && st == RECEIVED -> avail = now + 1 :: else fi;
			started = 0; tok = 0; exp = 0
		:: else
		fi
	}
}

/* R1: ingest with the hand-off, and the pool's job of the row (w = 0). */
proctype R1() {
	byte w = 0;
	byte sent, rt, got, tries, res;
	mtype out;
	/* The broker delivers the event until a write of it is acknowledged. */
deliver:
	tries++;
	d_step { /* @go (*Pool).Reserve: a fresh token; the lease is counted from before the insert */
		sent = now; ntok++; rt = ntok
	};
	CRASHPOINT;
	/* The insert commits and R1 learns it, or its reply is lost (it
	 * committed, or not): the broker then delivers the event again. */
	if
	:: res = 0
	:: tries < 2 -> res = 1
	:: tries < 2 -> res = 2
	fi;
	d_step { /* @sql insert_batch.sql @go PGWriter.WriteBatch */
		if
		:: res != 2 && st == ABSENT ->
			st = RECEIVED; tok = rt; exp = now + L; avail = RESERVED_AT;
			att = RESERVE_ATT; started = 0; instok = rt; got = rt
		:: else -> got = 0 /* ON CONFLICT DO NOTHING: a duplicate (or nothing written) */
		fi
	};
	if
	:: res != 0 ->
		/* @go (*Pool).Cancel: the room given back, nothing handed off */
		d_step { /* @go (*Pool).Cancel */ got = 0; rt = 0; sent = 0; res = 0 };
		CRASHPOINT;
		goto deliver
	:: else -> acked = 1 /* acknowledged once the insert committed */
	fi;
	CRASHPOINT;
	/* @go (*Pool).Deliver: the rows the insert wrote are handed over */
	if
	:: got == 0 && !DELIVER_ANY -> goto stop
	:: else
	fi;
	d_step { /* @go (*Pool).Deliver */
		PROP(P_no_dup_handoff, rt == instok);
		jtok[w] = rt; jon[w] = 1; jlu[w] = sent + L;
		ONE_HOLDER;
		got = 0; sent = 0
	};
	CRASHPOINT;
	if
	:: /* the pool stopped since Reserve: @go (*handOff).giveBack */
		out = RELEASE; goto write
	:: /* @go (*books).dispatchLocked: at risk, or started */
		if
		:: jlost[w] -> goto stop
		:: !jlost[w] && now + MARGIN > jlu[w] -> out = RELEASE; goto write
		:: !jlost[w] && now + MARGIN <= jlu[w]
		fi
	fi;
	/* @go (*executor).execute: the handler starts (its attempt counted by the insert) */
	d_step { /* @go (*executor).execute */ if :: tok == jtok[w] -> hs = 1 :: else fi };
	CRASHPOINT;
	if
	:: out = OK
	:: out = RETRY
	:: out = FAIL
	fi;
	CRASHPOINT;
write:	skip;
	complete(out);
stop:	skip;
	d_step { /* @model: R1 stops */ jon[w] = 0; dead[w] = 1; alive--; out = 0; rt = 0; got = 0; sent = 0 };
	goto end;
crash:	skip;
	d_step { /* @model: R1 dies */ jon[w] = 0; dead[w] = 1; alive--; out = 0; rt = 0; got = 0; sent = 0 };
end:	skip
}

/* R1's lease renewals (the leaser renews a handed-off row as a claimed one). */
proctype Renewer() {
	byte w = 0;
	byte rs, rt;
	bit ok;
end:	do
	:: d_step { /* @go (*leaser).renew */
		jon[w] && !dead[w] && jlu[w] < now + RENEW ->
		rs = now; rt = jtok[w];
		/* @sql renew.sql */
		if
		:: tok == rt ->
			exp = now + L;
			if :: st == RECEIVED && RENEW_AVAIL -> avail = now + L :: else fi;
			ok = 1
		:: else
		fi
	};
		d_step { /* @go (*leaser).renew: the reply */
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

/* R2: one claim, its handler, its outcome. */
proctype R2() {
	byte w = 1;
	byte sent, got;
	mtype out;
	d_step { /* @go (*claimer).claim */
		sent = now
	};
	d_step { /* @sql claim.sql */
		if
		:: CLAIMABLE(now) ->
			/* a lapsed reservation keeps its attempt: the handler may have run */
			PROP(P_kill_costs, tok == 0 || !hs || att >= 1);
			ntok++; tok = ntok; att++; st = PROCESSING; exp = now + L; started = 1;
			got = tok
		:: else -> sent = 0
		fi
	};
	if
	:: got == 0 -> goto stop
	:: else
	fi;
	d_step { /* @go (*claimer).claim: the reply */
		jtok[w] = got; jon[w] = 1; jlu[w] = sent + L;
		ONE_HOLDER;
		got = 0; sent = 0
	};
	if
	:: out = OK
	:: out = RETRY
	fi;
	complete(out);
stop:	skip;
	d_step { /* @model: R2 stops */ jon[w] = 0; dead[w] = 1; alive--; out = 0 }
}

proctype Rescuer() {
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

/* Once both replicas stopped: past every lease, a rescue, and the row is
 * done or due for the next claim (or, never stored, the event is still the
 * broker's: it was not acknowledged). */
proctype Drain() {
	alive == 0 && renewers == 0;
	now = FAR;
	rescue();
	PROP(P_comes_back, st == PROCESSED || st == DEAD || CLAIMABLE(FAR + 1) || (st == ABSENT && !acked))
}

init {
	c_code { /* @model: the mutation this run checks */ char *m = getenv("INBOXD_MODEL_MUTATION"); now.mut = m ? atoi(m) : 0; };
	atomic { /* @model: the processes */
		run Clock();
		run Rescuer();
		run R1(); run Renewer();
		run R2();
		run Drain()
	}
}
