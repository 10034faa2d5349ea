/* mmrt_comm.h: the device mesh, its MPI communicators and the collectives a
 * generated trainer calls, with per-axis traffic counters.
 *
 * Mesh.  A trainer compiled for dp x cp x tp x pp runs on exactly that many
 * MPI ranks.  World rank -> coordinates with pp outermost, then dp, cp and
 * tp innermost, so a tp group is adjacent ranks (as in Megatron):
 *
 *     rank = ((pp_c * dp + dp_c) * cp + cp_c) * tp + tp_c
 *
 * The axes, their names and that order are support/mesh_axes.def's rows
 * (MmrtAxis is made from it; docs/mesh.md); mesh_rank_of and mesh_coords
 * in support/mesh_axes.h do the numbering, for the compiler too.
 *
 * Each axis has one communicator, built once with MPI_Comm_split: the ranks
 * whose coordinates differ only on that axis, ordered by that coordinate (so
 * a rank's rank in the tp communicator is its tp coordinate).  MMRT_AXIS_WORLD
 * is a duplicate of MPI_COMM_WORLD.  A world of one rank (the program started
 * without mpirun) works: MPI_Init makes a singleton.
 *
 * Tensors.  Buffers are row-major and contiguous.  A collective that splits
 * or joins one dimension sees the tensor as (outer, dim, inner): `dim` is the
 * *global* size of that dimension, outer the product of the dimensions
 * before it, inner the product of those after it.  A dimension of size D
 * split over n ranks gives rank r the part [lo, lo + len) of
 * mmrt_split_range(): D / n elements each and one more for the first D % n
 * ranks (torch.tensor_split, numpy.array_split), so uneven sizes work and a
 * part may be empty.  With D % n == 0 every part is D / n.
 *
 * Dtypes: MMRT_F32 and MMRT_BF16 (sums of bf16 are computed in fp32 and
 * rounded to nearest even after each pairwise step; reduce gradients in fp32
 * when that matters).
 *
 * Axis of size 1: every collective is a copy (when send != recv) or a no-op;
 * it is still counted (with 0 bytes sent).  Send/recv on a size-1 axis
 * would send to itself: only mmrt_sendrecv supports that (as a copy).
 *
 * Errors.  Communicators use MPI_ERRORS_RETURN, so an MPI failure returns
 * instead of killing the process inside MPI.  Every function returns MMRT_OK
 * (0) or a negative code and writes into m->err a message naming the
 * collective, the axis, its size and this rank, e.g.
 *
 *     recv on axis pp (2 ranks; pp rank 1, world rank 3): failed:
 *     MPI_ERR_TRUNCATE: message truncated
 *     all_reduce on axis dp (4 ranks; dp rank 0, world rank 0): did not
 *     finish within 300.0 s: a rank has probably died or hung; abort the job
 *
 * Bad arguments give MMRT_ERR_ARG, failed allocations MMRT_ERR_NOMEM, MPI
 * failures and timeouts MMRT_ERR_COMM.  A failed collective leaves the job
 * in an unknown state (the other ranks may be blocked in it), so the trainer
 * must not retry: it prints m->err (with its rank) on stderr, writes no
 * checkpoint, and calls mmrt_comm_abort(), which calls MPI_Abort on the
 * world so that mpirun ends every rank.  That is the only function here
 * that ends the process.
 *
 * A rank that dies: OpenMPI's mpirun notices the exit and kills the job.  A
 * rank that hangs (alive but never joins): set a timeout with
 * mmrt_comm_set_timeout(); collectives then run as their non-blocking
 * variants polled until done or the deadline, which returns MMRT_ERR_COMM.
 * The pending request cannot be cancelled, hence the abort.
 *
 * Watchdog (NCCL's habit).  With a timeout, a call that passes its deadline
 * asks the other ranks of its axis where they are, over a duplicate of the
 * axis communicator: every rank waiting in a call answers such probes (it
 * looks for them every 20 ms while it polls), with the number of collectives
 * it has started on that axis and the call it waits in.  After a grace of
 * timeout / 10 (0.5 to 5 s) the message names the ranks that did not arrive:
 *
 *     all_reduce on axis dp (2 ranks; dp rank 0, world rank 0): did not
 *     finish within 30.0 s: world rank 1 did not arrive (no answer within
 *     3.0 s: stopped, dead, or busy outside communication); abort the job
 *
 * or "world rank 2 has not arrived: it waits in all_gather on axis tp".
 * The normal path costs a clock read per poll and an MPI_Iprobe per axis
 * every 20 ms.
 *
 * Counters.  Every call adds to a process-wide table per (kind, axis): the
 * number of calls, the elements of the logical tensor (see MmrtCommKind)
 * and the bytes this rank sends under the standard ring accounting, n being
 * the axis size and S the size in bytes of the full tensor:
 *
 *     all_reduce      2 (n - 1) / n * S
 *     all_gather      (n - 1) / n * S     (S: the gathered, full tensor)
 *     reduce_scatter  (n - 1) / n * S     (S: the full input)
 *     all_to_all      (n - 1) / n * S     (S: this rank's buffer)
 *     broadcast       S on the root, 0 elsewhere
 *     send            S;  recv 0;  barrier 0
 *
 * each rounded down per call.  These are the nccl-tests "bus bandwidth"
 * factors and the per-rank volumes of ir-design.md section 8; uneven splits
 * use the same formulas.  The table is process-wide (a trainer has one
 * mesh); mmrt_comm_counters_reset() starts a new step.
 *
 * Threads: call from one thread at a time (the step function).  Buffers of
 * one call must not overlap, except send == recv for all_reduce (in place).
 */
#ifndef MMRT_COMM_H
#define MMRT_COMM_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../../support/mesh_axes.h"
#include "mmrt_kernels.h" /* MmrtDtype */
#include "mmrt_log.h"     /* MmrtStatus, mmrt_errf */

#ifdef __cplusplus
extern "C" {
#endif

/* A communication failure (MPI error or timeout); MmrtStatus codes are -1
 * to -6, this one sits apart from them. */
enum { MMRT_ERR_COMM = -16 };

/* The rows of support/mesh_axes.def, then the world. */
typedef enum MmrtAxis {
#define MESH_AXIS(ID, name, nest, ir) MMRT_AXIS_##ID = MESH_##ID,
#include "../../support/mesh_axes.def"
  MMRT_AXIS_WORLD = MESH_NAXES,
  /* hierarchical ZeRO's two levels of dp (mmrt_mesh_hzero): the dp ranks
   * of this rank's node group, and the ranks at this rank's place in the
   * other node groups */
  MMRT_AXIS_DP_NODE,
  MMRT_AXIS_DP_CROSS,
  MMRT_NAXES,
} MmrtAxis;

/* "dp", "cp", "tp", "pp", "world". */
const char *mmrt_axis_name(MmrtAxis ax);

typedef struct MmrtMesh {
  int size[MMRT_NAXES];  /* ranks on each axis; size[WORLD] = world size */
  int coord[MMRT_NAXES]; /* this rank's coordinate; coord[WORLD] = rank */
  MPI_Comm comm[MMRT_NAXES];
  MPI_Op bf16_sum;  /* user op, created once */
  double timeout_s; /* 0: blocking MPI calls */
  void *scratch;    /* pack/unpack space, grown on demand */
  size_t scratch_bytes;
  int *cnt;      /* 4 x world ints: counts and displacements */
  char err[512]; /* message of the last failure */
  /* the watchdog: a duplicate of each axis communicator for its probes,
   * collectives started per axis (the same count on every rank of it),
   * and the call this rank waits in (NULL: none) */
  MPI_Comm wd[MMRT_NAXES];
  int64_t seq[MMRT_NAXES];
  const char *cur_op;
  int cur_ax;
  int64_t probe[2];
  /* gradient buckets reduced non-blocking (mmrt_*_bucket_start, waited in
   * mmrt_bucket_wait), by slot: grown on demand */
  struct MmrtPending *pend;
  int npend;
  /* hierarchical ZeRO (mmrt_hzero.c): dp ranks per node group (0: off),
   * the node copies of the parameters gathered across the nodes (valid
   * until the next update) and the space the two levels pack into */
  int hz_node;
  /* its two-level collectives and clean-up, set by mmrt_mesh_hzero (so
   * that mmrt_comm.c calls into mmrt_hzero.c only through them) */
  int (*hz_all_gather)(struct MmrtMesh *m, const void *send, void *recv, size_t outer, size_t dim,
                       size_t inner, MmrtDtype dt);
  int (*hz_reduce_scatter)(struct MmrtMesh *m, const void *const *send, void *const *recv,
                           const size_t *dims, int nbufs, MmrtDtype dt);
  void (*hz_free)(struct MmrtMesh *m);
  struct MmrtHzCopy *hz_copy;
  int nhz_copy, hz_cap;
  char *hz_space;
  size_t hz_space_bytes;
  /* placement = separate with the first stage on one rank (docs/subplans.md
   * "One rank for a group"): world = 1 + tp; rank 0 plays the first stage's
   * tp logical ranks. On rank 0 fan[k] is the pp communicator with the
   * second stage's tp rank k (fan[0] = comm[PP]); a pp transfer or
   * all-reduce of rank 0's goes over each (the fan's extra sends wait in
   * fan_req until mmrt_wait_sends), a receive keeps fan[0]'s copy.
   * The watchdog covers each: fan_wd[k] / fan_seq[k] are fan[k]'s probe
   * communicator and collective count (k >= 1), swapped into comm[PP],
   * wd[PP], seq[PP] while rank 0 waits on fan[k] (fan_cur = k then);
   * fan_req_k[i]: the fan index of fan_req[i]; fan_req_of[i]: the
   * request (on fan[0]) it copies, which mmrt_wait_sends waits it with. */
  int one0;
  int nfan;
  MPI_Comm *fan;
  MPI_Comm *fan_wd;
  int64_t *fan_seq;
  int fan_cur;
  MPI_Request *fan_req;
  int *fan_req_k;
  MPI_Request *fan_req_of;
  int nfan_req, fan_cap;
  void *fan_buf;
  size_t fan_bytes;
} MmrtMesh;

/* The world size a launcher gave this process, read before MPI starts:
 * Open MPI's mpirun (OMPI_COMM_WORLD_SIZE, _RANK) or a PMI launcher
 * (PMI_SIZE, PMI_RANK: MPICH's hydra, srun --mpi=pmi2); 0 when started
 * without one. *rank (may be NULL) gets this process's rank. */
int mmrt_launcher_world(int *rank);

/* MMRT_OK unless a launcher started a world of another size than
 * the product of sizes (MESH_NAXES of them, by MmrtAxis); then
 * MMRT_ERR_MISMATCH with mmrt_mesh_init's message naming `who` ("trainer",
 * "generator"). Starts no MPI, touches no file: an executable calls it
 * first, so that a one-rank trainer under mpirun -np 2 does not run twice
 * over the same files. */
int mmrt_world_check(const char *who, const int sizes[MESH_NAXES], char *err, size_t errlen);

/* Initialise MPI if nobody has (MPI_Init_thread, FUNNELED), check that the
 * world size is the product of sizes (MESH_NAXES of them, by MmrtAxis:
 * dp, cp, tp, pp), and build the communicators.  On a
 * mismatch returns MMRT_ERR_MISMATCH with e.g. "the trainer was compiled
 * for tp=2 x dp=2 = 4 ranks, but mpirun started 3 (start it with mpirun -np
 * 4)" and leaves nothing to free.  The message also goes to m->err. */
int mmrt_mesh_init(MmrtMesh *m, const int sizes[MESH_NAXES], char *err, size_t errlen);

/* mmrt_mesh_init for placement = separate with its first stage on one rank
 * (sizes: pp = 2, tp = T, dp = cp = 1): world = 1 + T, rank 0 the first
 * stage (pp 0, tp 0), rank 1 + k the second stage's tp rank k. */
int mmrt_mesh_init_one0(MmrtMesh *m, const int sizes[MESH_NAXES], char *err, size_t errlen);

/* Where the ranks run, written by world rank 0 to `out` (collective over
 * the world; the other ranks write nothing): a line "placement: W ranks on
 * H hosts (dp=.. tp=..)" and one line per host, hosts in the order of
 * their lowest rank, e.g.
 *     placement: host node1: ranks 0 1 at dp.tp 0.0 0.1
 * the host name being MPI_Get_processor_name's, the coordinates those of
 * the axes of more than one rank, in the order dp cp tp pp.  Not counted
 * in the communication counters. */
int mmrt_mesh_placement(MmrtMesh *m, FILE *out, char *err, size_t errlen);

/* Free the communicators and scratch (not MPI itself). */
void mmrt_mesh_free(MmrtMesh *m);

/* MPI_Finalize, if MPI is initialised and not yet finalised. */
int mmrt_comm_finalize(void);

/* MPI_Abort(MPI_COMM_WORLD, code): ends every rank of the job.  For the
 * trainer's main after it has printed the error; does not return. */
__attribute__((noreturn)) void mmrt_comm_abort(int code);

/* 0 (the default) makes every call block until MPI returns; > 0 makes a
 * call that is not done after `seconds` fail with MMRT_ERR_COMM. */
void mmrt_comm_set_timeout(MmrtMesh *m, double seconds);

/* The trainer's --comm-timeout default, in seconds. */
#define MMRT_COMM_TIMEOUT_DEFAULT 300.0

/* Part r of a dimension of size dim split over n ranks (see above). */
void mmrt_split_range(int64_t dim, int n, int r, int64_t *lo, int64_t *len);

/* World rank of the rank at coordinates coord (MESH_NAXES, by MmrtAxis) of
 * this mesh: support/mesh_axes.h's numbering. */
int mmrt_mesh_rank_of(const MmrtMesh *m, const int coord[MESH_NAXES]);

/* ---- collectives; each is collective over the ranks of axis `ax` ---- */

/* buf on every rank of the axis = buf on the rank with coordinate root. */
int mmrt_broadcast(MmrtMesh *m, MmrtAxis ax, void *buf, size_t count, MmrtDtype dt, int root);

int mmrt_barrier(MmrtMesh *m, MmrtAxis ax);

/* MPI_Allreduce in place of `count` elements of an MPI datatype with an MPI
 * op (the trainer's flags and metric sums: MPI_INT with MPI_MAX, MPI_INT64_T
 * sums, MPI_FLOAT_INT with MPI_MAXLOC), under the timeout and watchdog of the
 * collectives above; `what` names it in messages.  Not counted: it is the
 * driver's bookkeeping, not the model's traffic. */
int mmrt_all_reduce_mpi(MmrtMesh *m, MmrtAxis ax, void *buf, int count, MPI_Datatype type,
                        MPI_Op mop, const char *what);

/* Point to point along an axis; peer is a coordinate on that axis, or
 * MMRT_NO_PEER for nothing (e.g. the first pipeline stage's recv). */
enum { MMRT_NO_PEER = -1 };
int mmrt_send(MmrtMesh *m, MmrtAxis ax, const void *buf, size_t count, MmrtDtype dt, int peer,
              int tag);
int mmrt_recv(MmrtMesh *m, MmrtAxis ax, void *buf, size_t count, MmrtDtype dt, int peer, int tag);
/* Send to dest and receive from src at once (no deadlock when both sides
 * send: a pipeline's send-forward/recv-backward, a ring step).  Counted as
 * one send and one recv.  dest == src == self is a copy. */
int mmrt_sendrecv(MmrtMesh *m, MmrtAxis ax, const void *sendbuf, size_t sendcount, int dest,
                  void *recvbuf, size_t recvcount, int src, MmrtDtype dt, int tag);

/* The pipeline's transfers (runtime/comm/mmrt_pp.c): `bytes` of a tensor of
 * `elems` elements to or from a peer coordinate, counted as send and recv
 * (elems, bytes as above).  mmrt_isend_raw only starts the send; the step
 * waits for its requests with mmrt_wait_sends.  mmrt_recv_raw blocks; both
 * waits run under the timeout and the watchdog, `what` naming the call in
 * messages (and, its first 19 characters, in the watchdog's answers to the
 * other ranks), e.g. "recv from pp rank 0 (stage 1's forward input,
 * micro-batch 2)". */
int mmrt_isend_raw(MmrtMesh *m, MmrtAxis ax, const void *buf, size_t elems, size_t bytes, int peer,
                   int tag, MPI_Request *rq);
int mmrt_recv_raw(MmrtMesh *m, MmrtAxis ax, void *buf, size_t elems, size_t bytes, int peer,
                  int tag, const char *what);
int mmrt_wait_sends(MmrtMesh *m, MmrtAxis ax, int n, MPI_Request *rq, const char *what);
/* A pipeline transfer split over tp (docs/pp-transfers.md): buf holds
 * `elems` elements of `es` bytes, of which this rank's chunk, part tp rank
 * of mmrt_split_range(elems, tp), has arrived; the chunks all-gathered in
 * place over the tp axis, so that every tp rank holds the whole (counted as
 * an all_gather of the tp axis; under the timeout and the watchdog, `what`
 * naming the call). */
int mmrt_tp_gather_chunks(MmrtMesh *m, void *buf, size_t elems, size_t es, const char *what);

/* Pipeline neighbours: pp coordinate + 1 and - 1, wrapping around (the last
 * stage's next is the first, as interleaved schedules and rings need). */
int mmrt_pp_next(const MmrtMesh *m);
int mmrt_pp_prev(const MmrtMesh *m);
int mmrt_send_next(MmrtMesh *m, const void *buf, size_t count, MmrtDtype dt);
int mmrt_recv_prev(MmrtMesh *m, void *buf, size_t count, MmrtDtype dt);
int mmrt_send_prev(MmrtMesh *m, const void *buf, size_t count, MmrtDtype dt);
int mmrt_recv_next(MmrtMesh *m, void *buf, size_t count, MmrtDtype dt);

/* ---- counters ---- */

typedef enum MmrtCommKind {
  MMRT_COMM_ALL_REDUCE,     /* elems: count */
  MMRT_COMM_ALL_GATHER,     /* elems: the gathered (full) tensor */
  MMRT_COMM_REDUCE_SCATTER, /* elems: the full input */
  MMRT_COMM_ALL_TO_ALL,     /* elems: this rank's send buffer */
  MMRT_COMM_BROADCAST,      /* elems: count */
  MMRT_COMM_SEND,           /* elems: count */
  MMRT_COMM_RECV,           /* elems: count */
  MMRT_COMM_BARRIER,        /* elems: 0 */
  MMRT_COMM_RING,           /* elems: count (a block sent to the next rank of the ring) */
  MMRT_COMM_NKINDS,
} MmrtCommKind;

/* "all_reduce", "all_gather", ... */
const char *mmrt_comm_kind_name(MmrtCommKind k);

typedef struct MmrtCommCount {
  uint64_t calls;
  uint64_t elems;
  uint64_t bytes; /* sent by this rank, by the accounting above */
  int n;          /* axis size at the last call (0: never called) */
} MmrtCommCount;

MmrtCommCount mmrt_comm_counter(MmrtCommKind k, MmrtAxis ax);

/* Phases of a training step: the generated step function says where it is
 * (forward until the loss, backward from the loss's gradient seed, update
 * from the gradient norm and the optimizer on), and every call is also
 * counted under the phase current at the time.  Evaluation is forward. */
typedef enum MmrtCommPhase {
  MMRT_PHASE_FORWARD,
  MMRT_PHASE_BACKWARD,
  MMRT_PHASE_UPDATE,
  MMRT_NPHASES,
} MmrtCommPhase;
const char *mmrt_comm_phase_name(MmrtCommPhase p); /* "forward", "backward", "update" */
/* The number of times a step entered its update phase: parameters stored
 * by the update change then (hierarchical ZeRO's node copies expire). */
uint64_t mmrt_comm_updates(void);

/* ---- hierarchical ZeRO (mmrt_hzero.c, docs/hzero.md) ----
 * mmrt_mesh_hzero splits dp into node groups of `node` consecutive dp
 * ranks (axis DP_NODE) and the ranks at the same place in every group
 * (axis DP_CROSS).  From then on the dp all-gathers and reduce-scatters
 * (ZeRO's, the only ones on dp) run in two levels, each counted on its
 * axis: a parameter stored as dp part c = o n + i (node group o, place i)
 *   all-gather: across the groups once per update into this rank's node
 *     copy (the parts o' n + i of every group o': 1/n of the parameter),
 *     then within the group from the node copies;
 *   reduce-scatter: within the group to the sum of the parts o' n + i
 *     (1/n), then across the groups to part c.
 * The non-blocking forms (buckets, prefetched gathers) do the same before
 * they return; their wait finds them done. */
int mmrt_mesh_hzero(MmrtMesh *m, int node, char *err, size_t errlen);
MmrtCommCount mmrt_comm_counter_phase(MmrtCommPhase p, MmrtCommKind k, MmrtAxis ax);

/* Sum of bytes sent over every kind and axis. */
uint64_t mmrt_comm_bytes_total(void);

void mmrt_comm_counters_reset(void);

/* A table of the non-zero rows (kind, axis, n, calls, elements, MiB sent)
 * and a total line. */
void mmrt_comm_counters_print(FILE *f);

/* One JSON object, the non-zero rows and the total, e.g.
 * {"all_reduce.tp":{"n":2,"calls":4,"elems":4096,"bytes":16384},
 *  "bytes":16384}
 * Returns the length it needed, like snprintf. */
size_t mmrt_comm_counters_json(char *buf, size_t len);

/* Gradient buckets started non-blocking (mmrt_all_reduce_bucket_start,
 * mmrt_reduce_scatter_bucket_start) and waited for (mmrt_bucket_wait) since
 * the last reset: how many, how many were complete when their wait began,
 * the mmrt_comm_progress calls that found a bucket in flight (one per
 * kernel the generated code ran between a start and its wait), the seconds
 * in the start calls (packing, posting), from start to wait (the compute
 * they overlap) and blocked in the waits (with the unpacking), and the
 * seconds in blocking bucket calls (mmrt_all_reduce_buckets,
 * mmrt_reduce_scatter_bucket) for comparison. */
typedef struct MmrtOverlapStats {
  uint64_t started, waited, done_at_wait, polls, blocking_calls;
  double start_s, window_s, wait_s, blocking_s;
  double reduce_s; /* in mmrt_all_reduce (losses, label counts, norms) */
} MmrtOverlapStats;
MmrtOverlapStats mmrt_comm_overlap_stats(void);
/* One line of the above (nothing when no bucket ran). */
void mmrt_comm_overlap_print(FILE *f);

/* Ring shifts (ring attention, runtime/comm/mmrt_ring.c): start sending count
 * elements of send to the next rank of a ring of n ranks on communicator
 * comm (a sub-communicator of axis ax, or its own; this rank is me: the
 * next is (me + 1) mod n) and receiving as many into recv from the
 * previous one, non-blocking (one "ring" call of count elements sent on
 * ax); test progresses them (returns 1 when both are done); wait finishes
 * them through the watchdog. The seconds from start to wait and blocked in
 * the waits are kept for mmrt_comm_ring_print. */
int mmrt_ring_shift_start(MmrtMesh *m, MmrtAxis ax, MPI_Comm comm, int n, int me, const void *send,
                          void *recv, size_t count, MmrtDtype dt, int tag, MPI_Request rq[2]);
/* All-to-all of count elements to and from each of the n ranks of comm (a
 * sub-communicator of axis ax: USP's Ulysses groups), blocking; counted as
 * an all_to_all on ax. */
int mmrt_all_to_all_group(MmrtMesh *m, MmrtAxis ax, MPI_Comm comm, int n, const void *send,
                          void *recv, size_t count, MmrtDtype dt);
int mmrt_ring_shift_test(MPI_Request rq[2]);
int mmrt_ring_shift_wait(MmrtMesh *m, MmrtAxis ax, MPI_Request rq[2]);
/* "ring shifts: N, X ms from start to wait, Y ms blocked in the waits" (nothing when none ran). */
void mmrt_comm_ring_print(FILE *f);

/* The collectives generated code calls: mmrt_abi.def. */
#define MMRT_ABI_SECTION_COMM
#include "mmrt_abi.h"

#ifdef __cplusplus
}
#endif

#endif
