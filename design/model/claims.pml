/*
 * The claim and resume protocol of one session's turn, for Spin.
 *
 * What the store and the actors do (design/model/README.md maps every step to its function):
 * NODES coordinator instances share one store; the turn has one tool call, which may wait for a
 * permission; nodes crash, pause (a zombie that comes back), shut down gracefully, start late;
 * decisions (reply, interrupt, decline) arrive at any node at any time.
 *
 * Every store transaction is one atomic block. A node's steps are guarded by UP(n): a crashed or
 * paused node does nothing. Abstract time: "the lease expired" is a step that only a paused node's
 * lease can take (a running node beats three times a lease).
 *
 * Switches (cc -D...; `make model` runs each):
 *   LIVENESS                  the last node never crashes nor shuts down (it "stays up")
 *   BROKEN_NO_FENCE           the epoch check of every fenced write (and of the tool start) removed
 *   BROKEN_RESUME_AFTER_CLAIM the resume decided on the claim's read and counted later, unchecked
 *   MAIN_UNFENCED_START       before this branch: the tool starts with no fence check
 *   MAIN_BEGIN_UNCHECKED      before this branch: _begin does not read the turn again in its CAS
 *   MAIN_STEALS_SUSPENDED     before this branch: a suspended turn is taken whoever holds its claim
 *   MAIN_PENDING_ONLY         code today: a restart/shutdown keeps only a *pending* wait
 *   MANUAL                    [server] resume = "manual" on every node: takeovers park, a person resumes
 *   BROKEN_PLAIN_UNPARK       with MANUAL: a resume clears the flag (1 -> 0) instead of "resume asked" (2)
 *   NODES, PAUSES, TRIES, MAXRES, MAXEPOCH   the bounds (design/model/README.md)
 */

#ifndef NODES
#define NODES 2
#endif
#ifndef MAXRES
#define MAXRES 2          /* [server] max_resumes */
#endif
#ifndef MAXEPOCH
#define MAXEPOCH 7        /* a bound the real model provably never reaches (asserted) */
#endif
#ifndef PAUSES
#define PAUSES 1          /* how many times a node may freeze (SIGSTOP) in one run */
#endif

#ifndef TRIES
#define TRIES 2           /* attempts of each decision (a refused one may be tried again) */
#endif

#define NONE 255

/* claims.state */
#define RELEASED  0
#define HELD      1
#define CSUSP     2

/* turns.status */
#define QUEUED    0
#define RUNNING   1
#define STOPPING  2
#define TSUSP     3
#define SETTLED   4

/* stop reasons; SUCCESS is a settled turn's outcome without a stop */
#define R_NONE      0
#define R_INTERRUPT 1
#define R_DECLINED  2
#define R_SELF      3   /* timeout or model error: decided by the turn itself, intent committed */
#define R_ERROR     4   /* Failure without intent: resumed max_resumes times */
#define R_SHUTDOWN  5
#define R_SUCCESS   6

/* tool_calls.status of the one call; EXEC: its start committed (the tool runs) */
#define C_NONE    0
#define C_RUNNING 1
#define C_EXEC    2
#define C_DONE    3
#define C_FAILED  4

/* permission_requests.status */
#define P_NONE     0
#define P_PENDING  1
#define P_REPLIED  2   /* once */
#define P_REJECTED 3   /* reject without a message: declined */
#define P_REVOKED  4

/* a decision's fate (ghost) */
#define D_NONE     0
#define D_ACCEPTED 1
#define D_APPLIED  2
#define D_REFUSED  3

/* a node's actor: where its session actor is */
#define IDLE    0
#define CLAIM   1
#define EXEC    2
#define RESUME  3
#define RECORD  4
#define POPEN   5
#define WAIT    6
#define START   7
#define TRUN    8
#define CSETTLE 9
#define CLEAN   10
#define SETTLE  11
#define PARK    12      /* Registry._park, after the watch read the turn */

/* turns.parked */
#define UNPARKED 0
#define PARKED   1
#define ASKED    2      /* a resume was asked; the takeover comes next */

/* ---- the store ---------------------------------------------------------------------------- */
byte claim_state = RELEASED;
byte claim_owner = NONE;
byte epoch = 0;
byte turn = QUEUED;
byte stop_reason = R_NONE;
byte outcome = R_NONE;
byte resumes = 0;
byte call = C_NONE;
bool call_asks;                 /* the call's permission rule says "ask" */
byte perm = P_NONE;
byte parked = UNPARKED;

/* instances */
bool alive[NODES];
bool started[NODES];
bool stopped[NODES];            /* instances.stopped */
bool lease[NODES];              /* heartbeat younger than the lease */

/* ---- each node's process state (the registry, the actor's TurnScope) ----------------------- */
bool paused[NODES];
bool closing[NODES];            /* runtime.closing */
byte pc[NODES];
byte myep[NODES];
bool tko[NODES];                /* a Takeover */
byte prev[NODES];
byte seen[NODES];               /* the turn's status as next_turn read it */
byte lstop[NODES];              /* handle.reason */
bool restoring[NODES];

/* ---- ghosts: what the properties talk about ------------------------------------------------ */
byte starts = 0;                /* tool starts, all nodes */
bool can_resume = false;        /* the turn was left (suspended, or its owner lost) and not resumed */
bool intent = false;            /* a deliberate stop's intent was committed */
byte d_reply = D_NONE;
byte d_int = D_NONE;
byte d_decl = D_NONE;
byte d_resume = D_NONE;         /* a person's resume: accepted (asked), applied (mark_resumed) */
byte terminal = 0;              /* terminal settlements (session.idle) */
byte pauses = 0;
bool self_stopped = false;

#define UP(n)        (alive[n] && started[n] && !paused[n])
#define DEAD(o)      (o == NONE || !alive[o] || stopped[o] || !lease[o])
#ifdef BROKEN_NO_FENCE
#define FENCED(n)    true
#else
#define FENCED(n)    (claim_owner == n && epoch == myep[n] && claim_state == HELD)
#endif
#define ACTIVE(n)    (pc[n] >= EXEC && pc[n] <= CSETTLE)
#define RUNS_HERE(n) (pc[n] >= EXEC)

/* A fenced write that fails: the actor raises Fenced and ends ("claim_lost"). */
#define LOST(n)      pc[n] = IDLE; lstop[n] = R_NONE; restoring[n] = false

/* Is a call's wait kept for the next start (kept_for_restore)? The fixed rule also keeps a wait
 * whose "once" reply no wait has applied yet, while the tool has not started. */
#ifdef MAIN_PENDING_ONLY
#define KEEPS_WAIT   (call == C_RUNNING && perm == P_PENDING)
#else
#define KEEPS_WAIT   (call == C_RUNNING && (perm == P_PENDING || perm == P_REPLIED))
#endif

/* A call fails for a restart or a shutdown: a reply that was accepted and never applied is lost. */
#define FAIL_CALL_NOT_DELIBERATE \
	assert(d_reply != D_ACCEPTED); \
	call = C_FAILED

/* A call fails for a deliberate stop: an unapplied reply is superseded by it (first stop wins). */
#define FAIL_CALL_DELIBERATE \
	call = C_FAILED

/* The tool starts: exactly once, under the current epoch. */
#define TOOL_STARTS(n) \
	starts++; \
	assert(starts == 1); \
	assert(claim_owner == n && claim_state == HELD && epoch == myep[n]); \
	assert(parked != PARKED); \
	if \
	:: d_reply == D_ACCEPTED -> d_reply = D_APPLIED \
	:: else -> skip \
	fi; \
	call = C_EXEC

/* --------------------------------------------------------------------------------------------- */

/* Registry.recover (at start and each watch tick) + session.run's next_turn + the Takeover.
 * A tick that finds nothing to do changes nothing, so it is not a step of the model. */
#define OBS_QUEUED(n)  (turn == QUEUED && claim_state == RELEASED)
#define OBS_CRASHED(n) ((turn == RUNNING || turn == STOPPING) && claim_owner != n && DEAD(claim_owner))
#ifdef MAIN_STEALS_SUSPENDED
#define OBS_SUSP(n)    (turn == TSUSP && claim_owner != n)
#else
#define OBS_SUSP(n)    (turn == TSUSP && claim_owner != n && (claim_state == CSUSP || DEAD(claim_owner)))
#endif
#ifdef MANUAL
/* Registry.recover with resume = "manual": what it would take over it parks, but a stop decided before
 * (stopping) is settled, a parked turn is left, and a turn whose resume was asked is taken over. */
#define OBS_LEFT(n)    (OBS_CRASHED(n) || OBS_SUSP(n))
#define OBS_TAKE(n)    (OBS_LEFT(n) && parked != PARKED && (turn == STOPPING || parked == ASKED))
#define OBS_PARK(n)    (OBS_LEFT(n) && turn != STOPPING && parked == UNPARKED)
#define CAN_OBSERVE(n) (OBS_QUEUED(n) || OBS_TAKE(n) || OBS_PARK(n))

inline observe(n) {
	if
	:: OBS_QUEUED(n) -> tko[n] = false; prev[n] = NONE; seen[n] = QUEUED; pc[n] = CLAIM
	:: OBS_TAKE(n) -> tko[n] = true; prev[n] = claim_owner; seen[n] = turn; pc[n] = CLAIM
	:: OBS_PARK(n) -> prev[n] = claim_owner; pc[n] = PARK
	fi
}

/* Registry._park's transaction: a crashed turn's claim, still held by the owner it read, becomes
 * suspended (compare-and-set); a suspended turn is parked unless a resume was asked meanwhile. */
inline park(n) {
	if
	:: parked == UNPARKED && turn == RUNNING && claim_state == HELD && claim_owner == prev[n] ->
		assert(d_resume != D_ACCEPTED);   /* a late park never swallows a resume */
		claim_state = CSUSP; parked = PARKED
	:: parked == UNPARKED && turn == TSUSP ->
		assert(d_resume != D_ACCEPTED);
		parked = PARKED
	:: else -> skip
	fi;
	pc[n] = IDLE
}
#else
#define CAN_OBSERVE(n) (OBS_QUEUED(n) || OBS_CRASHED(n) || OBS_SUSP(n))

inline observe(n) {
	if
	:: OBS_QUEUED(n) -> tko[n] = false; prev[n] = NONE; seen[n] = QUEUED; pc[n] = CLAIM
	:: OBS_CRASHED(n) || OBS_SUSP(n) -> tko[n] = true; prev[n] = claim_owner; seen[n] = turn; pc[n] = CLAIM
	fi
}
#endif

/* session._begin: acquire_claim, a compare-and-set that grows the epoch. The fixed _begin reads
 * the turn again in the same transaction: a turn that another node started or settled meanwhile
 * is left alone. */
#ifdef MAIN_BEGIN_UNCHECKED
#define CAS_OK(n)  (claim_state == RELEASED || (tko[n] && claim_owner == prev[n]))
#else
#define CAS_OK(n)  ((!tko[n] && turn == QUEUED && claim_state == RELEASED) || \
                    (tko[n] && (turn == RUNNING || turn == STOPPING || turn == TSUSP) && \
                     claim_state != RELEASED && claim_owner == prev[n] && parked != PARKED))
#endif

inline claim(n) {
	if
	:: CAS_OK(n) ->
		assert(epoch < MAXEPOCH);
		epoch++; claim_owner = n; claim_state = HELD; myep[n] = epoch;
#ifndef MAIN_BEGIN_UNCHECKED
		seen[n] = turn;
#endif
		if
		:: tko[n] && turn == RUNNING -> can_resume = true    /* its owner is lost: a crash */
		:: else -> skip
		fi;
		if
		:: !tko[n] -> turn = RUNNING
		:: else -> skip
		fi;
		pc[n] = EXEC;
		if
		:: closing[n] -> lstop[n] = R_SHUTDOWN   /* the shutdown arrived while the turn was starting */
		:: else -> skip
		fi
	:: else -> pc[n] = IDLE                      /* claim_held_elsewhere */
	fi
}

/* session._execute's first decisions. */
inline execute(n) {
	if
	:: lstop[n] != R_NONE -> pc[n] = SETTLE
	:: else ->
		if
		:: tko[n] && seen[n] == STOPPING -> lstop[n] = stop_reason; pc[n] = SETTLE
		:: tko[n] && seen[n] != STOPPING && resumes >= MAXRES -> lstop[n] = R_ERROR; pc[n] = SETTLE
		:: tko[n] && seen[n] != STOPPING && resumes < MAXRES -> pc[n] = RESUME
		:: !tko[n] -> pc[n] = RECORD
		fi
	fi
}

/* session._resume: mark_resumed and _fail_interrupted_work, one fenced transaction. */
inline resume(n) {
	if
	:: lstop[n] != R_NONE -> pc[n] = SETTLE   /* cancelled at the transaction's checkpoint */
	:: lstop[n] == R_NONE && !FENCED(n) -> LOST(n)
	:: else ->
		if
#ifdef BROKEN_RESUME_AFTER_CLAIM
		:: true ->     /* decided on what the claim's read saw: no check of the status here */
#else
		:: turn == RUNNING || turn == TSUSP ->
#endif
			assert(can_resume);            /* at most one resume per suspension or crash */
			assert(!intent);               /* a deliberate stop never resumes */
			can_resume = false;
			assert(parked != PARKED);
			turn = RUNNING; resumes++; parked = UNPARKED;
			if
			:: d_resume == D_ACCEPTED -> d_resume = D_APPLIED
			:: else -> skip
			fi;
			if
			:: KEEPS_WAIT -> restoring[n] = true; pc[n] = POPEN
			:: call == C_RUNNING && !KEEPS_WAIT -> FAIL_CALL_NOT_DELIBERATE; pc[n] = RECORD
			:: call == C_EXEC -> call = C_FAILED; pc[n] = RECORD  /* the tool was running: interrupted */
			:: call != C_RUNNING && call != C_EXEC -> pc[n] = RECORD
			fi
		:: else -> lstop[n] = stop_reason; pc[n] = SETTLE   /* a stop decided while it was down */
		fi
	fi
}

/* step.run: the model asked for the call (or, once the call is settled, answered). */
inline record(n) {
	if
	:: !FENCED(n) -> LOST(n)
	:: else ->
		if
		:: call == C_NONE ->
			call = C_RUNNING;                   /* session.tool.started */
			if
			:: call_asks -> pc[n] = POPEN
			:: else -> pc[n] = START
			fi
		:: else -> pc[n] = CSETTLE             /* the model answers: the step and the turn succeed */
		fi
	fi
}

/* permission_wait._open (and, restoring, the re-publication) then _already_replied's read. */
inline popen(n) {
	if
	:: !FENCED(n) -> LOST(n)
	:: else ->
		if
		:: !restoring[n] -> perm = P_PENDING
		:: else -> skip
		fi;
		restoring[n] = false;
		pc[n] = WAIT
	fi
}

/* The tool starts: tool_call._run_bounded, after store.durable(). */
inline start(n) {
#ifdef MAIN_UNFENCED_START
	TOOL_STARTS(n); pc[n] = TRUN
#else
	if
	:: !FENCED(n) -> LOST(n)
	:: else -> TOOL_STARTS(n); pc[n] = TRUN
	fi
#endif
}

/* The tool finished: _settle_succeeded (fenced). */
inline tool_done(n) {
	if
	:: !FENCED(n) -> LOST(n)
	:: else -> call = C_DONE; pc[n] = RECORD
	fi
}

/* A stopped actor's cleanup: permission_wait._settle and tool_call._settle_stopped (fenced). */
inline clean(n) {
	if
	:: !FENCED(n) -> LOST(n)
	:: else ->
		if
		:: lstop[n] == R_SHUTDOWN && turn != STOPPING && KEEPS_WAIT -> skip   /* kept for the restore */
		:: else ->
			if
			:: perm == P_PENDING -> perm = P_REVOKED
			:: else -> skip
			fi;
			if
			:: call == C_RUNNING || call == C_EXEC ->
				if
				:: lstop[n] == R_SHUTDOWN && turn != STOPPING -> FAIL_CALL_NOT_DELIBERATE
				:: else -> FAIL_CALL_DELIBERATE
				fi
			:: else -> skip
			fi
		fi;
		pc[n] = SETTLE
	fi
}

/* session._settle: committed_reason, sweep, the terminal state, the claim released or suspended. */
inline settle(n) {
	if
	:: !FENCED(n) -> LOST(n)
	:: else ->
		if
		:: turn == STOPPING && (lstop[n] == R_NONE || lstop[n] == R_SHUTDOWN) -> lstop[n] = stop_reason
		:: else -> skip
		fi;
		assert(turn != SETTLED);
		if
		:: lstop[n] == R_SHUTDOWN ->
			if
			:: KEEPS_WAIT -> skip
			:: else ->
				if
				:: perm == P_PENDING -> perm = P_REVOKED
				:: else -> skip
				fi;
				if
				:: call == C_RUNNING || call == C_EXEC -> FAIL_CALL_NOT_DELIBERATE
				:: else -> skip
				fi
			fi;
			turn = TSUSP; claim_state = CSUSP; can_resume = true
		:: else ->
			if
			:: perm == P_PENDING -> perm = P_REVOKED
			:: else -> skip
			fi;
			if
			:: call == C_RUNNING || call == C_EXEC -> FAIL_CALL_DELIBERATE
			:: else -> skip
			fi;
			/* the committed stop is the one settled (a max_resumes failure, decided first, excepted) */
			assert(!intent || lstop[n] == stop_reason || lstop[n] == R_ERROR);
			assert(lstop[n] != R_NONE || (call != C_RUNNING && call != C_EXEC));
			turn = SETTLED; claim_state = RELEASED; claim_owner = NONE;
			outcome = (lstop[n] == R_NONE -> R_SUCCESS : lstop[n]);
			terminal++;
			assert(terminal == 1);
			/* every decision applied or refused, never lost */
			assert(d_reply != D_ACCEPTED || intent || lstop[n] == R_ERROR)
		fi;
		pc[n] = IDLE; lstop[n] = R_NONE; restoring[n] = false
	fi
}

/* TurnScope.stop for a timeout or a model error: the intent first, fenced. */
inline self_stop(n) {
	if
	:: !FENCED(n) -> LOST(n)
	:: else ->
		if
		:: turn == RUNNING || turn == TSUSP ->
			turn = STOPPING; stop_reason = R_SELF; intent = true; lstop[n] = R_SELF; self_stopped = true;
			if
			:: pc[n] <= RECORD -> pc[n] = SETTLE
			:: pc[n] > RECORD && pc[n] <= TRUN -> pc[n] = CLEAN
			:: else -> skip
			fi
		:: else -> skip
		fi
	fi
}

/* A stop reaches the actor (handle.stop cancels its scope): where it goes next. */
inline divert(n) {
	if
	:: pc[n] == RECORD -> pc[n] = SETTLE
	:: pc[n] >= POPEN && pc[n] <= TRUN -> pc[n] = CLEAN
	:: else -> skip
	fi
}

proctype node(byte n) {
end:
	do
	/* the registry's watch and the actor start */
	:: atomic { UP(n) && !closing[n] && pc[n] == IDLE && CAN_OBSERVE(n) -> observe(n) }
	:: atomic { UP(n) && pc[n] == CLAIM -> claim(n) }
#ifdef MANUAL
	:: atomic { UP(n) && pc[n] == PARK -> park(n) }
#endif
	:: atomic { UP(n) && pc[n] == EXEC -> execute(n) }
	:: atomic { UP(n) && pc[n] == RESUME -> resume(n) }
	:: atomic { UP(n) && pc[n] == RECORD -> record(n) }
	:: atomic { UP(n) && pc[n] == POPEN -> popen(n) }
	/* the wait ends: a reply (applied here), or a reject (the call fails declined) */
	:: atomic { UP(n) && pc[n] == WAIT && lstop[n] == R_NONE && perm == P_REPLIED ->
		pc[n] = START }
	:: atomic { UP(n) && pc[n] == WAIT && lstop[n] == R_NONE && perm == P_REJECTED ->
		pc[n] = CLEAN }
	:: atomic { UP(n) && pc[n] == START -> start(n) }
	:: atomic { UP(n) && pc[n] == TRUN && lstop[n] == R_NONE -> tool_done(n) }
	:: atomic { UP(n) && pc[n] == CSETTLE -> pc[n] = SETTLE }
	:: atomic { UP(n) && pc[n] == CLEAN -> clean(n) }
	:: atomic { UP(n) && pc[n] == SETTLE -> settle(n) }
	/* a timeout or a model error, once in a run */
	:: atomic { UP(n) && !self_stopped && lstop[n] == R_NONE && pc[n] >= RECORD && pc[n] <= TRUN &&
	            (turn == RUNNING || !FENCED(n)) ->
		self_stop(n) }
	/* apply_remote_decisions: a stop committed elsewhere (or by this node's decision path) */
	:: atomic { UP(n) && !closing[n] && ACTIVE(n) && lstop[n] == R_NONE && turn == STOPPING ->
		lstop[n] = stop_reason; divert(n) }
	/* a node that shut down marks its instance stopped once its actor is done, and exits */
	:: atomic { UP(n) && closing[n] && !stopped[n] && pc[n] == IDLE ->
		stopped[n] = true; alive[n] = false }
	od
}

/* Decisions, through node d: decisions.interrupt / reply_permission / dismiss_form. */
inline interrupt(d) {
	if
	:: (turn == RUNNING || (turn == TSUSP && parked != UNPARKED)) &&
	   !(RUNS_HERE(d) && (lstop[d] != R_NONE || pc[d] == SETTLE)) ->
		turn = STOPPING; stop_reason = R_INTERRUPT; intent = true; d_int = D_ACCEPTED; parked = UNPARKED;
		if
		:: d_resume == D_ACCEPTED -> d_resume = D_APPLIED   /* superseded by the stop */
		:: else -> skip
		fi;
		if
		:: ACTIVE(d) -> lstop[d] = R_INTERRUPT; divert(d)   /* _stop_turn_of: it runs here */
		:: else -> skip
		fi
	:: else -> skip   /* answers false: nothing running to stop */
	fi
}

inline reply(d) {
	if
	:: !closing[d] && perm == P_PENDING -> perm = P_REPLIED; d_reply = D_ACCEPTED
	:: !closing[d] && perm != P_PENDING -> d_reply = D_REFUSED   /* PermissionAlreadySettled */
	:: closing[d] -> skip                                         /* CoordinatorClosed: ask again */
	fi
}

/* decisions.resume then Registry.resume: the compare-and-set, then this node's takeover at once. */
inline resume_asked(d) {
	if
	:: !closing[d] && parked == PARKED && pc[d] == IDLE ->
#ifdef BROKEN_PLAIN_UNPARK
		parked = UNPARKED;
#else
		parked = ASKED;
#endif
		d_resume = D_ACCEPTED;
		tko[d] = true; prev[d] = claim_owner; seen[d] = turn; pc[d] = CLAIM
	:: else -> skip   /* NothingToResume, or this node's actor is busy: ask again */
	fi
}

inline decline(d) {
	if
	:: !closing[d] && perm == P_PENDING ->
		perm = P_REJECTED; d_decl = D_ACCEPTED;
		if
		:: turn == RUNNING || turn == TSUSP ->
			turn = STOPPING; stop_reason = R_DECLINED; intent = true; parked = UNPARKED;
			if
			:: d_resume == D_ACCEPTED -> d_resume = D_APPLIED
			:: else -> skip
			fi;
			if
			:: ACTIVE(d) -> lstop[d] = R_DECLINED; divert(d)
			:: else -> skip
			fi
		:: else -> skip
		fi
	:: !closing[d] && perm != P_PENDING -> d_decl = D_REFUSED
	:: closing[d] -> skip
	fi
}

#ifdef LIVENESS
#define KILLABLE(n)  (n < NODES - 1)
#else
#define KILLABLE(n)  true
#endif

byte tries[4];                  /* attempts of each decision: interrupt, reply, decline, resume */

/* Everything that happens to node n, and every decision people make through it. */
proctype env(byte n) {
end:
	do
	/* the node starts (a new instance: a late node, or a restart) */
	:: atomic { !started[n] -> started[n] = true; alive[n] = true; lease[n] = true }
	/* kill -9, power loss, a forced exit after the grace period */
	:: atomic { UP(n) && KILLABLE(n) -> alive[n] = false }
	/* graceful shutdown: Coordinator.shutdown -> Registry.shutdown -> SessionHandle.shutdown */
	:: atomic { UP(n) && KILLABLE(n) && !closing[n] ->
		closing[n] = true;
		if
		:: ACTIVE(n) && lstop[n] == R_NONE -> lstop[n] = R_SHUTDOWN; divert(n)
		:: else -> skip
		fi }
	/* SIGSTOP: the node freezes; its lease may run out; SIGCONT: it beats again at once */
	:: atomic { UP(n) && pauses < PAUSES -> paused[n] = true; pauses++ }
	:: atomic { alive[n] && paused[n] && lease[n] -> lease[n] = false }
	:: atomic { alive[n] && paused[n] -> paused[n] = false; lease[n] = true }
	/* decisions through this node, each tried at most TRIES times, accepted at most once */
	:: atomic { UP(n) && d_int == D_NONE && tries[0] < TRIES && turn != QUEUED -> tries[0]++; interrupt(n) }
	:: atomic { UP(n) && d_reply == D_NONE && d_decl == D_NONE && tries[1] < TRIES && perm != P_NONE ->
		tries[1]++; reply(n) }
	:: atomic { UP(n) && d_decl == D_NONE && d_reply == D_NONE && tries[2] < TRIES && perm != P_NONE ->
		tries[2]++; decline(n) }
#ifdef MANUAL
	:: atomic { UP(n) && d_resume == D_NONE && tries[3] < TRIES && parked == PARKED ->
		tries[3]++; resume_asked(n) }
#endif
	od
}

init {
	byte i = 0;
	atomic {
		/* the permission rule: asks, or allows at once */
		if
		:: call_asks = true
		:: call_asks = false
		fi;
		started[0] = true; alive[0] = true; lease[0] = true;
		do
		:: i < NODES -> pc[i] = IDLE; lstop[i] = R_NONE; prev[i] = NONE; run node(i); run env(i); i++
		:: else -> break
		od
	}
}

#ifdef LIVENESS
/* Every turn reaches a settled state once some node stays up. */
ltl settles { <> (turn == SETTLED) }
#endif
