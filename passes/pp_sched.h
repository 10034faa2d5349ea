/* Pipeline schedules as data (issue 11, item 3).
 *
 * A schedule is, per pipeline rank, a list of actions: the forward (F), the
 * whole backward (B), or the backward split into its input-gradient (I) and
 * weight-gradient (W) halves, of micro-batch m on stage s; and, once
 * pp_sched_add_comms has run, the transfers between stages on different
 * ranks (SEND_F/RECV_F for activations, SEND_B/RECV_B for gradients). The
 * text form of an action is PyTorch's: "2F0" (stage 2, forward, micro-batch
 * 0), "1SEND_B3". With v virtual stages per rank there are p·v stages and
 * rank r holds stages r, p + r, 2p + r, ... (chunk c is stage c·p + r).
 *
 * The generators (GPipe, 1F1B, interleaved 1F1B, ZB-H1) emit compute-only
 * lists; pp_sched_simulate is a discrete-event simulator over those lists
 * with per-stage costs: it checks every dependency (a stage's forward after
 * the previous stage's, a backward after its own forward and the next
 * stage's backward, W after I), the order of the transfers on each channel
 * (MPI matches messages of one tag in order), finds deadlocks, and measures
 * the makespan, each rank's busy time, the bubble and the micro-batches in
 * flight per rank. */
#ifndef MMC_PP_SCHED_H
#define MMC_PP_SCHED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "../ir/settings.h"

typedef enum {
  PP_F,      /* forward */
  PP_B,      /* whole backward (input and weight gradients) */
  PP_I,      /* backward, input gradient only */
  PP_W,      /* backward, weight gradient only */
  PP_SEND_F, /* send this stage's output to the next stage */
  PP_RECV_F, /* receive this stage's input from the previous stage */
  PP_SEND_B, /* send the gradient of this stage's input to the previous stage */
  PP_RECV_B, /* receive the gradient of this stage's output from the next stage */
  PP_NKINDS
} PpKind;

/* the schedules are settings.def's (MmSchedule, one order, one set of names) */
typedef MmSchedule PpSchedKind;
#define PP_1F1B        MM_SCHED_1F1B
#define PP_GPIPE       MM_SCHED_GPIPE
#define PP_INTERLEAVED MM_SCHED_INTERLEAVED
#define PP_ZBH1        MM_SCHED_ZBH1
#define PP_NSCHEDS     MM_SCHED_COUNT

typedef struct {
  PpKind kind;
  int stage;
  int mb;
} PpAction;

typedef struct {
  PpSchedKind kind;
  int p, v, m; /* ranks, virtual stages per rank, micro-batches */
  int *n;      /* n[r]: actions of rank r */
  PpAction **act;
} PpSchedule;

/* The name of a schedule as the language spells it ("gpipe", "1f1b",
 * "interleaved", "zbh1"; ir/settings.h mm_schedule_names), and back (-1: unknown). */
const char *pp_sched_name(PpSchedKind k);
int pp_sched_parse(const char *name);
const char *pp_kind_name(PpKind k);

/* Builds the compute-only lists. Returns false with a message in err when
 * the combination is not possible: p < 1, m < 1, v < 1, v > 1 for a
 * schedule without virtual stages, interleaved with m not a multiple of p,
 * 1F1B-type schedules with fewer micro-batches than stages. */
bool pp_sched_build(PpSchedule *s, PpSchedKind kind, int p, int v, int m, char *err, size_t errn);
/* Inserts SEND_F after each forward whose next stage is on another rank and
 * RECV_F before each forward whose previous stage is, and likewise SEND_B /
 * RECV_B around the backwards (I or B). */
void pp_sched_add_comms(PpSchedule *s);
void pp_sched_free(PpSchedule *s);

int pp_action_format(const PpAction *a, char *buf, size_t n);
/* One line per rank: "rank 0: 0F0 0F1 0B0 ...". */
void pp_sched_print(FILE *f, const PpSchedule *s);

/* Per-stage costs (arrays of p·v entries): forward, input gradient, weight
 * gradient; a whole backward B costs i + w. comm is the latency of one
 * transfer. */
typedef struct {
  const double *f, *i, *w;
  double comm;
} PpCosts;

typedef struct {
  bool ok;               /* no dependency broken, no deadlock */
  char msg[256];         /* why not */
  double makespan;       /* end of the last action */
  double *busy;          /* per rank: time spent computing */
  double bubble;         /* (p·makespan − Σ busy) / Σ busy: idle time against the ideal */
  int *max_inflight;     /* per rank: most micro-batch×stage activations held at once */
  double **start, **end; /* per rank and action */
} PpSim;

/* Sends are buffered (MPI_Isend: the sender goes on); a receive waits for
 * its send plus comm. An activation is held from the start of its forward
 * to the end of its last backward piece (B, or W when split). */
bool pp_sched_simulate(const PpSchedule *s, const PpCosts *c, PpSim *out);
void pp_sim_free(PpSim *sim, int p);

/* The micro-batch slots rank r needs (its act, grad and input arenas, the
 * trainer's runtime/comm/mmrt_pp.c): its list walked in order, micro-batch k is
 * held from the rank's first action on it to its last, over all the
 * rank's stages; the most held at once. */
int pp_sched_slots(const PpSchedule *s, int r);

/* The schedule drawn as an SVG timeline: one row per rank, one box per
 * action, coloured by kind, labelled with the micro-batch. */
void pp_sched_svg(FILE *f, const PpSchedule *s, const PpSim *sim);
/* The same with each row's label (labels[r], NULL: "rank r"): placement =
 * separate names each row's group and ranks. */
void pp_sched_svg_labelled(FILE *f, const PpSchedule *s, const PpSim *sim,
                           const char *const *labels);

#endif
