/* collective.h: cross-replica collectives over the network, as state
 * machines of send and receive events.
 *
 * A collective runs over a group of devices (its members, in the order the
 * caller lists them) with an operation and an algorithm picked by name from
 * a const table: "ring", "bidir", "torus", "multiring", "p2p", "hierarchical",
 * or "auto", which predicts
 * each algorithm that can run the operation on the group with its closed
 * form and takes the fastest (ps_collective_why() says which and why).
 *
 * Each member runs a sequence of steps.  A step posts its sends (each a
 * network message, chunked and routed by hw/network.h) and completes when
 * every message it expects has wholly arrived; then the next step starts at
 * once.  A member's sends begin when it arrives (ps_collective_arrive), so a
 * late member delays exactly those that wait on its data.  Data that
 * arrives before its receiver reaches the step (or arrives at all) waits at
 * the receiver.  A step's messages are not gated on each other: a one-hop
 * ring step of m bytes takes alpha + m/B, the alpha-beta model's step.
 *
 * Rounds.  A collective is created once and reused: member m's k-th call to
 * ps_collective_arrive joins round k, and may be made as soon as m's done
 * callback for round k-1 has run, even while other members still finish
 * round k-1 (their data cannot be confused: every message carries its
 * round and step).
 *
 * Numerics.  When a member arrives with a float buffer (elem_bytes 4, f32
 * on the wire, or 2, bf16), every message carries a copy of the elements
 * it sends, taken when it is sent, and every chunk is added (reduce
 * phases) or copied (gather phases) into the receiver's buffer when the
 * chunk arrives, in the order the algorithm delivers chunks; so the result
 * has that algorithm's rounding.  On a bf16 wire the member's buffer is
 * rounded to bf16 when it arrives and every sum a chunk writes is rounded
 * to bf16, so buffers hold bf16 values throughout (floats in memory).  Gather phases copy, so every member ends bit-identical.  All
 * members of a round pass buffers, or none (timing only).
 *
 * Semantics per operation, for buffers of `count` elements:
 *   all-reduce      every member ends with the element-wise sum;
 *   reduce-scatter  member i ends with the sum over its block
 *                   (ps_collective_block_piece), the rest of its buffer
 *                   is scratch;
 *   all-gather      member i contributes its block and ends with all;
 *   broadcast       every member ends with the root's buffer;
 *   send-recv       a group of two: member `root` sends its buffer to the
 *                   other; the sender is done once its data is copied into
 *                   the network, the receiver when it has arrived.
 *
 * Integration example (exec/pod.c's plan collective c, which a device's
 * COLL_START op hands to the network and its COLL_DONE op waits for):
 *
 *     // once, when the pod is built: the network, then one collective
 *     // per collective of the plan, "auto"'s choices shared by a cache:
 *     pod->net = ps_network_new(engine, topo, chunk_bytes);
 *     g_autoptr(PsCollCache) cache = ps_coll_cache_new();
 *     PsCollSpec spec = {.op = pc->op, .algo = pc->algo, .devices = pc->members,
 *                        .n_members = pc->n_members, .count = pc->count,
 *                        .elem_bytes = pc->elem_bytes};
 *     // (numerics off: .count = bytes, .elem_bytes = 1)
 *     coll = ps_collective_new_cached(pod->net, &spec, cache, &error);
 *
 *     // at PS_OP_COLL_START, device d is member m of collective c:
 *     ps_collective_arrive(coll, m, numerics ? buffer_of(d, c) : NULL,
 *                          on_coll_done, member_state);
 *
 *     // at simulated time t, member m's result is in its buffer:
 *     static void on_coll_done(void *ctx, int member, ps_time_t t)
 *     {
 *       // mark the member done; a device waiting in PS_OP_COLL_DONE for
 *       // this collective reports the wait and runs its next op
 *     }
 *
 * Numerics need no separate cross_replica_sum: every member's buffer
 * already holds the algorithm's sum (pod.c does exactly this).
 *
 * Invariant: in every round, each member's steps run in order, each exactly
 * once; a member's done callback runs exactly once per round, after every
 * message it receives in that round has been applied to its buffer. */
#ifndef PS_COLLECTIVE_H
#define PS_COLLECTIVE_H

#include "hw/network.h"

typedef enum {
  PS_COLL_ALL_REDUCE,
  PS_COLL_REDUCE_SCATTER,
  PS_COLL_ALL_GATHER,
  PS_COLL_BROADCAST,
  PS_COLL_SEND_RECV,
  PS_COLL_N_OPS
} PsCollOp;

/* "allreduce", "reducescatter", "allgather", "broadcast", "sendrecv". */
const char *ps_coll_op_name(PsCollOp op);
gboolean ps_coll_op_parse(const char *name, PsCollOp *out);

/* Algorithm names of the table, then "auto"; NULL-terminated.  (transfer
 * full: g_strfreev) */
char **ps_coll_algo_names(void);
/* One line on what the named algorithm does, or NULL if unknown. */
const char *ps_coll_algo_summary(const char *name);

typedef struct {
  PsCollOp op;
  const char *algo;    /* a table name or "auto"; NULL means "auto" */
  const int *devices;  /* the group: network device ids, distinct (copied) */
  int n_members;
  int64_t count;       /* elements in each member's buffer */
  int elem_bytes;      /* with float buffers 4 (f32) or 2 (bf16); any >= 1 for timing */
  int root;            /* broadcast: the root member; send-recv: the sender */
} PsCollSpec;

typedef struct PsCollective PsCollective;

/* Called at the simulated time t when member's result is complete. */
typedef void (*PsCollDoneFn)(void *ctx, int member, ps_time_t t);

/* (transfer full) NULL with a PS_INPUT_ERROR if the spec is impossible:
 * an unknown algorithm or operation, a device out of range or repeated, an
 * algorithm that cannot run the operation on this group (torus needs the
 * group's coordinates to form a box), a send-recv group not of two.
 * Registers one event type with the network's engine: create collectives
 * once and reuse them across rounds.  net must outlive it. */
PsCollective *ps_collective_new(PsNetwork *net, const PsCollSpec *spec, GError **error);
/* "auto"'s choices, for the collectives made at one time on one network
 * (a pod's): one with the same members, operation, size and chunk as an
 * earlier one takes its algorithm and reason without predicting again (a
 * data-parallel plan has dozens of buckets of one size over one group).
 * Free it before the network changes (ps_network_degrade_link). */
typedef struct PsCollCache PsCollCache;
PsCollCache *ps_coll_cache_new(void);
void ps_coll_cache_free(PsCollCache *cache);
/* The plans the cache offers to groups of a shape it has seen: on a
 * network where translations are symmetries (hw/network.h's
 * ps_network_translation_symmetric), a collective whose group is an earlier
 * one's moved by even chip offsets, asking for the same operation, size and
 * algorithm, takes that collective's plan (its steps, algorithm and
 * prediction are the same), so the groups of a sharded plan's request
 * hold one plan between them. */
guint ps_coll_cache_plans(const PsCollCache *cache);
/* ps_collective_new, remembering in cache (may be NULL). */
PsCollective *ps_collective_new_cached(PsNetwork *net, const PsCollSpec *spec,
                                       PsCollCache *cache, GError **error);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(PsCollCache, ps_coll_cache_free)
void ps_collective_free(PsCollective *c);

/* The algorithm that runs ("ring", ...), never "auto".  (transfer none) */
const char *ps_collective_algo(const PsCollective *c);
/* For "auto": what was picked and each candidate's prediction; else the
 * algorithm's summary.  (transfer none) */
const char *ps_collective_why(const PsCollective *c);
/* The closed-form prediction of one round with every member arriving at
 * once, in seconds (see algorithms.c for each formula). */
double ps_collective_predict_s(const PsCollective *c);
/* The elements [*off, *off + *len) that are member's own block
 * (reduce-scatter result, all-gather contribution): its first piece. */
void ps_collective_block(const PsCollective *c, int member, int64_t *off, int64_t *len);
/* Piece `piece` of member's block, which is the union of its pieces
 * (disjoint, in ascending order); returns how many there are: 1 but for
 * multiring's reduce-scatter and all-gather, whose 2n streams each leave a
 * member one piece. */
int ps_collective_block_piece(const PsCollective *c, int member, int piece, int64_t *off,
                              int64_t *len);
int ps_collective_members(const PsCollective *c);

/* Member arrives for its next round with buf (count floats, transfer none,
 * must stay valid until done runs) or NULL for timing only; done(ctx, ...)
 * runs from an engine event once member's result is complete.  Calling it
 * again before done has run is a programming error. */
void ps_collective_arrive(PsCollective *c, int member, float *buf, PsCollDoneFn done, void *ctx);

/* One timing-only round with every member arriving now: runs the
 * network's engine until nothing is left to run and returns the time the
 * last member finished.  For tools timing a collective alone on a fresh
 * engine (podsim collective, the benches); the engine must hold no other
 * events that never end. */
ps_time_t ps_collective_run_round(PsCollective *c);

/* Every message of the collective, for traces: when member src sends one
 * of its round `round` to member dst (just before the network has it),
 * and when it has wholly arrived, at t; id is the network's message id
 * (its flow id in a traced network). */
typedef enum { PS_COLL_MSG_SENT, PS_COLL_MSG_ARRIVED } PsCollMsgEvent;
typedef void (*PsCollMessageFn)(void *ctx, PsCollMsgEvent what, int src, int dst,
                                int64_t round, uint64_t id, ps_time_t t);
/* Observes every message from now on (fn NULL stops): messages then take
 * the general path (ps_network_send_chained: in a traced network the flow
 * runs from the sender's track through every link to the receiver's; the
 * observer draws its ends).  Timing is the same either way. */
void ps_collective_set_message_observer(PsCollective *c, PsCollMessageFn fn, void *ctx);

/* The fast path (off unless turned on).  A timing-only round (no buffers, no
 * message observer, no trace on the network) of an algorithm whose steps
 * each send only for the receiver's same step, over routes no two pairs of
 * members share (every phase algorithm on a torus; not broadcast's
 * trees), is timed without network events when every link it uses is
 * quiet (nothing queued on it, nothing in flight towards it) from its
 * first member's arrival to its last's: its members are parked as they
 * arrive, and at the last arrival a sweep over the steps books every
 * message on the links exactly as the events would (same chunks, lanes,
 * rounding and link statistics) and schedules one event per member at
 * the time the events would have ended it.  Uncontended, the times are
 * the event path's to the picosecond.  Contention is resolved by who came
 * first, never by overlapping silently: a round's links are taken from
 * its last arrival to the end of its chunks there, so traffic that wants
 * them later queues behind (FIFO per link, as a message sent earlier is
 * queued ahead); a round whose links are busy at its first arrival runs
 * as events; one whose links something else took while its members were
 * parked starts them all at its last arrival, as events.  Every choice
 * depends on the simulated state alone, so runs stay deterministic.
 * ps_collective_fast_rounds: rounds timed this way so far. */
void ps_collective_set_fast_path(PsCollective *c, gboolean on);
uint64_t ps_collective_fast_rounds(const PsCollective *c);

/* Rounds every member has finished. */
int64_t ps_collective_rounds_done(const PsCollective *c);

#endif
