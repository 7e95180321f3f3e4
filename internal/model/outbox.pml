/*
 * outbox.pml: the outbox relay. One shard, two rows of one (destination,
 * key) in it, row 1's id drawn first: row 1 committed before row 2 was
 * written, or row 1's transaction commits at any time after row 2's (a
 * late commit), or never. Two relays (A and B) share the shard under a
 * lease; A may die at any step, or pause past its lease and resume.
 *
 * A relay's lease tick renews the shard it holds (outbox_shards_renew.sql:
 * under its token, unexpired) or takes a free or expired one
 * (outbox_shards_acquire.sql: a new token), its local deadline counted
 * from before the statement (Relay.leaseTick). Its publish loop reads a
 * batch only while a third of the lease is left (Relay.usable): the
 * pending rows of its shards in id order, leaving every row of a key
 * behind a refused row that waits (outbox_claim.sql); it sends a key's
 * rows in id order, none after one that failed (Relay.publishKind), and
 * writes the outcomes fenced by the lease
 * (outbox_outcome.sql: the shard still its own, under its token,
 * unexpired). A relay that stops gives its shard back
 * (outbox_shards_release.sql, Relay.releaseAll). A relay's lease tick
 * and publish loop are goroutines of their own in the relay; here they
 * take turns (each statement still interleaves with the other relay's).
 *
 * Each SQL statement is one indivisible step (a d_step); what the Go does
 * between two statements interleaves with everything else. The clock only
 * moves forward. Every step names the SQL statement file (@sql) or the Go
 * function (@go) it stands for, or says it is the model's own (@model);
 * internal/model's tests fail when a named file or function disappears.
 *
 * @protocol the outbox relay: shard leases, the fenced outcome, a paused relay waking after its lease was taken, per-key order, late commits
 *
 * @property P_out_fenced: an outcome is written only by the relay that holds the shard's lease, under its token, unexpired
 * @property P_one_publisher: no two relays may start a batch of the shard at once, each by its own clock
 * @property P_key_order: a row first goes out only after the rows of its key committed before it was written went out, or went dead
 * @property P_no_late_skip: once the relays stopped, every committed row gets published, whatever order its writers committed in
 *
 * Mutations: INBOXD_MODEL_MUTATION=<n> turns mutation n on; each must
 * break the property it names (model_test.go), except those marked safe,
 * which SPIN shows change nothing:
 * @mutation 1 OUTCOME_UNFENCED P_out_fenced: outbox_outcome.sql without its fence on the shard's lease
 * @mutation 2 ACQUIRE_LIVE P_one_publisher: outbox_shards_acquire.sql takes a shard whose lease has not expired
 * @mutation 3 DEADLINE_FROM_REPLY P_one_publisher: the relay counts its lease from the statement's reply, not from before it
 * @mutation 4 USABLE_ANY P_one_publisher: Relay.usable lets a batch start on a lease whatever is left of it
 * @mutation 5 WAITING_OFF P_key_order: outbox_claim.sql reads a key's later rows while a refused row of the key waits
 * @mutation 6 STOP_OFF P_key_order: Relay.publishKind sends a key's later rows in the batch after one of them was refused
 * @mutation 7 WATERMARK P_no_late_skip: the relay reads only rows above the highest id it published (watermill#311)
 * @safe 8 RENEW_EXPIRED: outbox_shards_renew.sql renews a lease that expired unless another relay took it (its token fences it)
 */

#define L       2   /* the lease, in ticks */
#define THIRD   1   /* a batch starts with a third of the lease left (rounded up) */
#define TMAX    3
#define FAR     20
#define MAXATT  2   /* INBOXD_OUTBOX_MAX_ATTEMPTS */

hidden byte P_out_fenced, P_one_publisher, P_key_order, P_no_late_skip;
#define PROP(name, c) assert(name || (c))

mtype = { PENDING, PUBLISHED, DEAD };
mtype = { NONE, ACKED, REFUSED };

byte mut;
#define MUT(n) (mut == n)

byte now;

/* outbox_shards: the shard's owner (0: none, 1: A, 2: B, 3: the drain), token, expires_at. */
byte owner, stok, sexp;

/* The rows (index 0 unused). */
bit   c[3];               /* committed */
mtype st[3];
byte  att[3], avail[3];
byte  wm;                 /* WATERMARK: the highest id published */

/* Each relay's map of shards (Relay.shards) and whether its loops run. */
bit  held[4];
byte htok[4], hdl[4];     /* the lease's token and local deadline */
bit  loops[4];
byte alive = 2;
bit  producing = 1;

/* Ghosts. */
bit  early;               /* row 1 committed before row 2 was written */
bit  sent[3];             /* the row was published at least once */
byte refusals = 1;        /* refusals left (bounds the search) */

/* Relay r may start a batch of the shard now, by its own clock. */
#define MAY(r) (loops[r] && held[r] && (MUT(4) || hdl[r] >= now + THIRD))
#define ONE_PUBLISHER PROP(P_one_publisher, !(MAY(1) && MAY(2)))
#define LEASE_START (MUT(3) -> now : start)

/* outbox_claim.sql: rows b1, b2 of the next batch, in id order (0: none). */
inline read_batch() {
	b1 = 0; b2 = 0;
	x = 1;
	do
	:: x > 2 -> break
	:: x <= 2 ->
		if
		/* pending, due, and not behind a refused row of its key that waits */
		:: c[x] && st[x] == PENDING && avail[x] <= now && (!MUT(7) || x > wm) &&
		   (MUT(5) || !(x == 2 && c[1] && st[1] == PENDING && att[1] > 0 && avail[1] > now)) ->
			if :: b1 == 0 -> b1 = x :: else -> b2 = x fi
		:: else
		fi;
		x++
	od;
	x = 0
}

/* outbox_outcome.sql: row b's outcome o, fenced by relay r's lease. */
inline record(r, b, o) {
	if
	:: b != 0 && o != NONE && st[b] == PENDING &&
	   (MUT(1) || (owner == r && stok == btok && sexp > now)) ->
		PROP(P_out_fenced, owner == r && stok == btok && sexp > now);
		att[b]++;
		if
		:: o == ACKED -> st[b] = PUBLISHED; if :: MUT(7) && b > wm -> wm = b :: else fi
		:: o == REFUSED && att[b] >= MAXATT -> st[b] = DEAD
		:: o == REFUSED && att[b] < MAXATT -> avail[b] = now + 1
		fi
	:: else
	fi
}

/* The send of row b (its first publication, or a duplicate). */
inline send(b) {
	if
	:: !sent[b] ->
		PROP(P_key_order, b != 2 || !early || sent[1] || st[1] == DEAD);
		sent[b] = 1
	:: sent[b] /* a duplicate */
	fi
}

/* The publication of row b, the batch's rows going in id order
 * (Relay.publishKind): refused (by Publisher.Check before it is sent, or
 * by the broker after: either way not delivered; B's verdicts only, to
 * bound the search), which stops its key: no later row of the key is sent
 * in this batch; or sent and acknowledged. (A row not reached gets no
 * outcome and stops its key too; it is read again first, as a refused
 * row whose outcome is fenced is: the model has those.) The publish
 * context ends at the lease's end, but a relay paused inside Publish sends
 * late all the same: here it may send at any time. */
inline publish(b, o) {
	if
	:: b == 0 -> o = NONE
	:: b != 0 && stop && !MUT(6) -> o = NONE
	:: b != 0 && (!stop || MUT(6)) ->
		if
		:: refusals > 0 && r == 2 -> refusals--; o = REFUSED; stop = 1
		:: send(b); o = ACKED
		fi
	fi
}

/* A may die after any statement (B is its peer: whatever B would do, A
 * does): its books vanish; what the database holds stays. */
#define CRASHPOINT if :: skip :: r == 1 -> goto crash fi

/* Relay r: lease ticks and batches, until it stops (or A dies). To bound
 * the search, B neither renews its lease (it takes one anew once it
 * lapsed) nor dies, and only B's checks refuse messages. */
proctype Relay(byte r) {
	byte start, x, b1, b2, btok;
	mtype o1, o2;
	bit stop, ok;
	do
	:: held[r] && r == 1 -> /* (B takes a lease anew when it lapses: it does not renew) */
		atomic { /* @go (*Relay).leaseTick: the lease is counted from before the statement */
			start = now;
			/* @sql outbox_shards_renew.sql */
			ok = (stok == htok[r] && owner == r && (sexp > now || MUT(8)));
			if :: ok -> sexp = now + L :: else fi;
			CRASHPOINT
		};
		d_step { /* @go (*Relay).leaseTick: the reply */
			if
			:: ok -> hdl[r] = LEASE_START + L; ONE_PUBLISHER
			:: else -> held[r] = 0; htok[r] = 0; hdl[r] = 0
			fi;
			ok = 0; start = 0
		}
	:: !held[r] ->
		atomic { /* @go (*Relay).leaseTick */
			start = now;
			/* @sql outbox_shards_acquire.sql */
			ok = (owner == 0 || sexp <= now || MUT(2));
			if :: ok -> owner = r; stok++; sexp = now + L; btok = stok :: else fi;
			CRASHPOINT
		};
		d_step { /* @go (*Relay).leaseTick: the reply */
			if
			:: ok -> held[r] = 1; htok[r] = btok; hdl[r] = LEASE_START + L; ONE_PUBLISHER
			:: else
			fi;
			ok = 0; start = 0; btok = 0
		}
	:: /* @go (*Relay).publishOnce: a batch, once Relay.usable found a third of the lease left */
		d_step { /* @go (*Relay).usable @sql outbox_claim.sql */
			MAY(r) -> btok = htok[r];
			read_batch();
			if :: b1 == 0 -> btok = 0 :: else fi
		};
		if
		:: b1 == 0
		:: b1 != 0 ->
			atomic { /* @go (*Relay).publish @go (*Relay).publishKind */
				CRASHPOINT;
				publish(b1, o1);
				publish(b2, o2)
			};
			atomic { /* @sql outbox_outcome.sql @go (*Relay).record */
				record(r, b1, o1);
				record(r, b2, o2);
				b1 = 0; b2 = 0; o1 = NONE; o2 = NONE; stop = 0; btok = 0;
				CRASHPOINT
			}
		fi
	:: /* it stops: the loops end, then @go (*Relay).releaseAll */
		loops[r] = 0;
		if
		:: held[r] ->
			d_step { /* @sql outbox_shards_release.sql */
				if :: stok == htok[r] && owner == r -> owner = 0; sexp = 0 :: else fi
			}
		:: else
		fi;
		d_step { /* @go (*Relay).releaseAll */ held[r] = 0; htok[r] = 0; hdl[r] = 0 };
		break
	od;
	skip;
	d_step { /* @model: the relay stops */ loops[r] = 0; alive-- };
	goto end;
crash:	skip;
	d_step { /* @model: A dies */ loops[r] = 0; held[r] = 0; htok[r] = 0; hdl[r] = 0; alive--;
		start = 0; b1 = 0; b2 = 0; o1 = NONE; o2 = NONE; stop = 0; btok = 0; ok = 0 };
end:	skip
}

/* The writers. Row 1 drew its id first. Either its transaction committed
 * before row 2 was written (early: the key's order is row 1, row 2), or
 * row 2 committed first and row 1's transaction commits at any time later
 * (a late commit), or never. */
proctype Producers() {
	if
	:: early -> skip
	:: !early -> if :: c[1] = 1 :: skip fi
	fi;
	producing = 0
}

proctype Clock() {
end:	do
	:: d_step { /* @model: the clock */ now < TMAX -> now++ }
	:: alive == 0 -> break
	od
}

/* Once the relays stopped: past every lease, a relay takes the shard and
 * publishes until it reads nothing; every committed row is then published
 * or dead. */
proctype Drain() {
	byte r = 3;
	byte x, b1, b2, btok;
	alive == 0 && !producing;
	now = FAR;
	d_step { /* @sql outbox_shards_acquire.sql */
		if :: owner == 0 || sexp <= now || MUT(2) -> owner = r; stok++; sexp = now + L; btok = stok :: else fi
	};
	do
	:: d_step { /* @sql outbox_claim.sql */ read_batch() };
		if
		:: b1 == 0 -> break
		:: else ->
			d_step { /* @sql outbox_outcome.sql: published */
				sent[b1] = 1; if :: b2 != 0 -> sent[b2] = 1 :: else fi;
				record(r, b1, ACKED); record(r, b2, ACKED)
			}
		fi
	od;
	skip;
	d_step { /* @model: the check */
		PROP(P_no_late_skip, !c[1] || st[1] == PUBLISHED || st[1] == DEAD);
		PROP(P_no_late_skip, st[2] == PUBLISHED || st[2] == DEAD)
	}
}

init {
	c_code { /* @model: the mutation this run checks */ char *m = getenv("INBOXD_MODEL_MUTATION"); now.mut = m ? atoi(m) : 0; };
	atomic { /* @model: the processes */
		st[1] = PENDING; st[2] = PENDING;
		if :: early = 1; c[1] = 1; c[2] = 1 :: early = 0; c[2] = 1 fi;
		loops[1] = 1; loops[2] = 1;
		run Clock();
		run Producers();
		run Relay(1);
		run Relay(2);
		run Drain()
	}
}
