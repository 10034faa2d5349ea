/* The cost model: passes/cost.h. */
#include "cost.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/ir_fused.h"
#include "../support/att_tile.h"
#include "../ir/ir_merge.h"
#include "accum.h"
#include "bucket.h"
#include "memplan.h"
#include "pp_sched.h"
#include "pp_stage.h"

/* Whether the pipeline sends v in tp chunks (pp_scatter; codegen/cg_pp.c
 * cg_pp_tp_chunk decides the same for the trainer): replicated over tp. */
static bool tp_chunked(const IrModule *m, const IrValue *v) {
  return m->plan.pp_scatter && m->mesh[IR_AX_TP] > 1 && m->plan.placement != MM_PLACE_SEPARATE &&
         m->plan.nsubplans == 0 && v->pl[IR_AX_TP].kind == IR_PL_B;
}

double cost_collective_s(const MmDevice *d, IrOp op, double bytes, int n, int stride) {
  if (n <= 1) return 0;
  bool intra = (double)stride * n <= d->devices_per_node;
  double bw = (intra ? d->intra_bw_gbs : d->inter_bw_gbs) * 1e9;
  double lat = (intra ? d->intra_lat_us : d->inter_lat_us) * 1e-6;
  if (!intra && op != IR_OP_COUNT && stride < d->devices_per_node) {
    /* k members in each node: NCCL runs a ring per adapter, each node's k
     * members' k adapters carry k rings' shares at once, so the crossing
     * moves k x inter_bw (never more than the links inside the node) */
    double k = floor((double)d->devices_per_node / stride);
    if (k > n) k = n;
    if (k * bw > d->intra_bw_gbs * 1e9)
      bw = d->intra_bw_gbs * 1e9;
    else
      bw *= k;
  }
  double steps = op == IR_OP_COUNT ? 1 : op == IR_OP_ALL_REDUCE ? 2.0 * (n - 1) : (double)(n - 1);
  return steps * lat + bytes / bw;
}

/* The most elements any operand or result of n has: on this rank, or
 * whole when m is NULL. */
static int64_t most_numel(const IrModule *m, const IrNode *n) {
  int64_t most = 0;
  for (int k = 0; k < n->nin + n->nout; k++) {
    const IrValue *v = ir_node_value(n, k);
    int64_t e = m ? ir_local_numel(m, v) : ir_numel(&v->shape);
    if (e > most) most = e;
  }
  return most;
}

/* The most any operand or result of n is split over the mesh. */
static double split_of(const IrModule *m, const IrNode *n) {
  double most = 1;
  for (int k = 0; k < n->nin + n->nout; k++) {
    const IrValue *v = ir_node_value(n, k);
    int64_t g = ir_numel(&v->shape), l = ir_local_numel(m, v);
    if (l > 0 && (double)g / (double)l > most) most = (double)g / (double)l;
  }
  return most;
}

/* A value's bytes on this rank. */
static double bytes_of(const IrModule *m, const IrValue *v) {
  return (double)ir_local_numel(m, v) * ir_dtype_size(v->dtype);
}

/* The bytes n reads and writes: its operands and results, and an operand
 * it updates in place (the optimizer's parameter and moments) twice, read
 * and written back. */
static double node_bytes(const IrModule *m, const IrNode *n) {
  double b = 0;
  for (int k = 0; k < n->nin; k++)
    b += (IR_OP_WRITES(n->op, k) ? 2.0 : 1.0) * bytes_of(m, n->in[k]);
  for (int k = 0; k < n->nout; k++) b += bytes_of(m, n->out[k]);
  return b;
}

/* The attention kernels' traffic through memory when they materialize the
 * B x H x T x S scores (softmax, dropout and the two batched products as
 * kernels of their own, as Megatron's of 2021): the device's bytes per
 * score, forward or backward, over the memory bandwidth; 0 for a fused
 * kernel that keeps them on chip. The scores are counted whole: such
 * kernels mask the causal half rather than skip it. */
static double scores_s(const IrModule *m, const MmDevice *d, const IrNode *n) {
  int fk = ir_ops[n->op].flop_kind, q = fk == IR_FL_ATTENTION ? 0 : 1;
  double per = fk == IR_FL_ATTENTION       ? d->attention_score_bytes
               : fk == IR_FL_ATTENTION_BWD ? d->attention_score_bytes_bwd
                                           : 0,
         ns = fk == IR_FL_ATTENTION       ? d->attention_score_ns
              : fk == IR_FL_ATTENTION_BWD ? d->attention_score_ns_bwd
                                          : 0;
  if ((per <= 0 && ns <= 0) || n->nin < q + 2 || n->in[q]->shape.rank != 4 ||
      n->in[q + 1]->shape.rank != 4)
    return 0;
  const IrShape *qs = &n->in[q]->shape, *ks = &n->in[q + 1]->shape;
  double scores = (double)qs->d[0] * qs->d[1] * qs->d[2] * ks->d[1] / split_of(m, n);
  /* a fused kernel's own per-score work (the exponentials: mmc calibrate's
   * attention_score_ns) skips the causal half */
  double half = n->attrs.v[IR_ATTR_CAUSAL].i ? 0.5 : 1;
  return scores * per / (d->mem_bw_gbs * 1e9) + half * scores * ns * 1e-9;
}

/* Ring attention (cp, {ring = true}; runtime/comm/mmrt_ring.c): the kernel
 * runs the ring's R = cp / U steps (U: the Ulysses groups of USP, 1
 * without), and while it computes one step's block the next block's K and V
 * (the backward: also the dK and dV sums) shift one rank along the ring; a
 * shift shows where it outlasts its block's compute (t / R each). Besides,
 * the kernel is called per block, not once: causal, each of B rows' two
 * chunks of c = T / 2 rows (the balanced split) meets every key chunk at or
 * before it, 2R + 1 calls a row of the batch over the ring; unmasked, one
 * call a step. Each call pays the attention's fixed time, and each forward
 * call's result is merged into the output by log-sum-exp, a row of D at a
 * time (a row's exponentials, logarithm and division: mmc calibrate's
 * row_ns; its three D-float rows in the cache). */
static double ring_s(const IrModule *m, const MmDevice *d, const IrNode *n, double t) {
  int cp = m->mesh[IR_AX_CP], fk = ir_ops[n->op].flop_kind;
  if (cp <= 1 || (fk != IR_FL_ATTENTION && fk != IR_FL_ATTENTION_BWD) ||
      !ir_attrs_has(&n->attrs, IR_ATTR_RING) || !n->attrs.v[IR_ATTR_RING].i)
    return 0;
  int q = fk == IR_FL_ATTENTION ? 0 : 1;
  if (n->nin < q + 3 || n->in[q]->shape.rank != 4) return 0;
  int U = m->plan.cp_ulysses > 1 ? m->plan.cp_ulysses : 1, R = cp / U > 1 ? cp / U : 1;
  double kv = 0;
  for (int j = q + 1; j <= q + 2; j++)
    kv += (double)ir_local_numel(m, n->in[j]) * ir_dtype_size(n->in[j]->dtype);
  if (fk == IR_FL_ATTENTION_BWD) kv *= 2; /* dK and dV travel with them */
  double shift = cost_collective_s(d, IR_OP_COUNT, kv, R, m->mesh[IR_AX_TP]);
  double exposed = shift - t / R;
  double s = exposed > 0 ? (R - 1) * exposed : 0;
  IrShape qs;
  ir_local_shape(m, n->in[q]->pl, &n->in[q]->shape, &qs);
  bool causal = n->attrs.v[IR_ATTR_CAUSAL].i;
  double calls = causal ? (double)qs.d[0] * (2 * R + 1) : R;
  /* each call's items: one row of c = T U / 2 queries over H / U heads
   * (causal), or the whole block; op_s counted the whole local shape once */
  int64_t tr = qs.d[1] * U, hr = qs.d[2] / U > 0 ? qs.d[2] / U : 1;
  double items = causal ? calls * mm_att_items(1, tr / 2, hr) : R * mm_att_items(qs.d[0], tr, hr);
  s += (calls - 1) * d->attention_overhead_us * 1e-6 +
       (items - mm_att_items(qs.d[0], qs.d[1], qs.d[2])) * d->attention_item_us * 1e-6;
  if (fk == IR_FL_ATTENTION) { /* the merges: each call's rows, every head */
    double rows = (double)qs.d[0] * qs.d[1] * qs.d[2] * (causal ? (2 * R + 1) / 2.0 : R);
    s += rows * (d->row_ns * 1e-9 + 3.0 * qs.d[3] * 4 / (d->cache_bw_gbs * 1e9));
  }
  return s;
}

/* Whether the trainer splits vector op n over its threads: the optimizer
 * always, another op from 2^15 elements of its largest local operand or
 * result (codegen/cg_module.c small_op). Such a call pays the wake-up of
 * threads that waited through the small ops before it
 * (parallel_overhead_us). */
static bool split_over_threads(const IrModule *m, const IrNode *n) {
  if (n->op == IR_OP_ADAMW || n->op == IR_OP_SGD) return true;
  /* the gradient norm's sum of squares runs its 8,192-element chunks on
   * the threads from five of them (runtime mmrt_sum_squares) */
  if (n->op == IR_OP_GRAD_NORM) {
    int64_t all = 0;
    for (int k = 0; k < n->nin; k++) all += ir_local_numel(m, n->in[k]);
    return all > 4 * 8192;
  }
  return most_numel(m, n) >= IR_SMALL_ELEMS;
}

/* Whether codegen runs n as a generated loop (codegen/cg_ops.c
 * lower_elementwise): a fused loop, or an elementwise op but a lone f32
 * add, sub, mul or div (the runtime's mmrt_binary_fwd runs those). */
static bool generated_loop(const IrNode *n) {
  if (n->op == IR_OP_FUSED) return true;
  if (!(ir_ops[n->op].flags & OPF_ELEMWISE)) return false;
  if (n->op != IR_OP_ADD && n->op != IR_OP_SUB && n->op != IR_OP_MUL && n->op != IR_OP_DIV)
    return true;
  for (int k = 0; k < n->nin + n->nout; k++)
    if (ir_node_value(n, k)->dtype != IR_F32) return true;
  return false;
}

/* Whether the trainer runs n on one of its rank's threads: a small op
 * (codegen's small_op: a product, convolution or attention under
 * IR_SMALL_FLOPS, another op whose largest operand or result has under
 * IR_SMALL_ELEMS elements) or a generated loop under IR_PAR_LOOP_MIN
 * elements (no parallel region: no fork's time). */
static bool one_thread(const IrModule *m, const IrNode *n) {
  switch (ir_ops[n->op].flop_kind) {
    case IR_FL_MATMUL:
    case IR_FL_LINEAR:
    case IR_FL_LINEAR_W:
    case IR_FL_CONV:
    case IR_FL_CONV_X:
    case IR_FL_CONV_W:
    case IR_FL_ATTENTION:
    case IR_FL_ATTENTION_BWD: return (double)ir_flops(n) / split_of(m, n) < IR_SMALL_FLOPS;
    default:
      return !split_over_threads(m, n) || (generated_loop(n) && most_numel(m, n) < IR_PAR_LOOP_MIN);
  }
}

/* The rows of a row-wise kernel (the norms, softmax, cross-entropy: each
 * row's sums and their horizontal adds, a division or square root, the
 * loop's start; mmc calibrate's row_ns a row), else 0. */
static double kernel_rows(const IrModule *m, const IrNode *n) {
  switch (n->op) {
    case IR_OP_LAYER_NORM:
    case IR_OP_LAYER_NORM_GRAD:
    case IR_OP_RMS_NORM:
    case IR_OP_RMS_NORM_GRAD:
    case IR_OP_SOFTMAX:
    case IR_OP_SOFTMAX_GRAD:
    case IR_OP_LOG_SOFTMAX:
    case IR_OP_LOG_SOFTMAX_GRAD:
    case IR_OP_CROSS_ENTROPY:
    case IR_OP_CROSS_ENTROPY_GRAD: break;
    default: return 0;
  }
  const IrValue *x = n->in[0];
  int64_t last = x->shape.rank ? x->shape.d[x->shape.rank - 1] : 1;
  return last > 0 ? (double)ir_local_numel(m, x) / (double)last : 0;
}

/* The float instructions one element of op takes in mmc's own kernel
 * where they are more than its model FLOPs (ops.def's FL_ELEM, which
 * count an exponential as one); 0: the model FLOPs stand.
 *
 * The rule, for the ops codegen expands inline (codegen/cg_loops.c
 * eval_op): every LLVM instruction that computes the element's value from
 * its operands counts 1 (fadd, fsub, fmul, fneg, fcmp, select, fptosi,
 * the float intrinsics fabs, copysign, floor, minnum and maxnum, and exp's
 * integer add and shift that build 2^n), except a division and a square
 * root, which count 8 (their throughput is about an eighth of an add's),
 * and a bitcast, which counts 0 (the same bits). So exp is 27 (Cephes'
 * range reduction and degree-6 polynomial, 2^n from its bits), tanh 54
 * (its polynomial and exp, both computed, and a division), erf 53.
 * tests/unit/check_cg_elem_work.c counts codegen's code by this rule and
 * fails when an entry here differs (or when an op's code outgrows its
 * model FLOPs without an entry).
 *
 * Not counted from code, estimates: log and pow are calls of libm (llvm.log,
 * llvm.pow), the dropout mask a call of the runtime's generator; the
 * runtime's row kernels are C in runtime/, counted by hand (softmax-like
 * rows 26 an element, most of it mmrt_ops.c exp_approx; the gradient norm
 * below). An f32 division outside a fused loop is the runtime's
 * mmrt_binary_fwd: the same division. */
int cost_elem_work(IrOp op) {
  switch (op) {
    case IR_OP_DIV: return 8;
    case IR_OP_RELU:
    case IR_OP_RELU_GRAD: return 2;
    case IR_OP_ABS_GRAD: return 5;
    case IR_OP_EXP: return 27;
    case IR_OP_LOG: return 20;
    case IR_OP_POW:
    case IR_OP_POW_SCALAR: return 40;
    case IR_OP_SQRT: return 8;
    case IR_OP_RSQRT: return 16;
    case IR_OP_TANH: return 54;
    case IR_OP_TANH_GRAD: return 57;
    case IR_OP_SIGMOID: return 37;
    case IR_OP_SIGMOID_GRAD: return 40;
    case IR_OP_SILU: return 38;
    case IR_OP_SILU_GRAD: return 42;
    case IR_OP_GELU: return 57;
    case IR_OP_GELU_GRAD: return 89;
    case IR_OP_GELU_TANH: return 62;
    case IR_OP_GELU_TANH_GRAD: return 71;
    case IR_OP_DROPOUT: return 40;
    case IR_OP_SOFTMAX:
    case IR_OP_LOG_SOFTMAX:
    case IR_OP_CROSS_ENTROPY: return 26;
    case IR_OP_SOFTMAX_GRAD:
    case IR_OP_LOG_SOFTMAX_GRAD:
    case IR_OP_CROSS_ENTROPY_GRAD: return 26;
    /* the runtime's sum of squares: a conversion, a multiply and an add
     * in double, in a baseline x86-64 build's two-lane vectors (8 times
     * the calibrated rate's 16 lanes) */
    case IR_OP_GRAD_NORM: return 24;
    default: return 0;
  }
}

/* A vector op's arithmetic (its FLOPs, with cost_elem_work's kernels' counts in
 * place of the model's): a fused loop sums its instructions' */
/* One instruction's work an element: cost_elem_work's count, else its
 * model FLOPs (at least 1); pow_scalar as codegen builds it for its
 * exponent (x * x for 2, x for 1, a square root for 0.5, else the call) */
static double instr_work(IrOp op, const IrAttrs *at) {
  if (op == IR_OP_POW_SCALAR && ir_attrs_has(at, IR_ATTR_VALUE)) {
    double p = at->v[IR_ATTR_VALUE].f;
    if (p == 2 || p == 1 || p == 0.5) return p == 2 ? 1 : p == 1 ? 0 : 8;
  }
  int w = cost_elem_work(op);
  return w ? w : ir_ops[op].flop_per_elem > 0 ? ir_ops[op].flop_per_elem : 1;
}

static double vector_work(const IrNode *n, double fl) {
  if (n->op != IR_OP_FUSED && !cost_elem_work(n->op)) return fl;
  double el = (double)most_numel(NULL, n), per = 0;
  if (n->op != IR_OP_FUSED)
    per = instr_work(n->op, &n->attrs);
  else {
    Arena a;
    arena_init(&a);
    IrFusedProg p;
    ir_fused_of(n, &p, &a);
    for (int q = 0; q < p.n; q++) per += instr_work(p.ins[q].op, &p.ins[q].attrs);
    arena_free(&a);
  }
  return per * el > fl ? per * el : fl;
}

/* What the step's order says of each node's operands (NULL, none counted,
 * when the device describes neither cost: the published devices):
 * - cold: the bytes it finds evicted from a core's cache: read or made
 *   more than cache_kb of operands and results before it (an LRU cache of
 *   one core's size), or not yet this step (parameters, inputs, the
 *   optimizer's state, values made in a former step). A view's result is
 *   its operand's data. Counted where cold_bw_gbs is below cache_bw_gbs.
 * - remote: for a one-thread node, the bytes of its operands (not cold)
 *   that an op split over the rank's threads wrote and no one-thread op
 *   has read since: all but its first thread's share (threads - 1 of
 *   threads) are in the other cores' caches. Counted where remote_bw_gbs
 *   is set and threads > 1.
 * Values' aux is used and cleared. */
typedef struct OpMiss {
  double cold, remote;
} OpMiss;

static OpMiss *op_misses(const IrModule *m, const MmDevice *d, const IrFunc *f, Arena *ar) {
  bool cold_on = d->cache_kb > 0 && d->cold_bw_gbs > 0 && d->cold_bw_gbs < d->cache_bw_gbs;
  bool remote_on = d->cache_kb > 0 && d->remote_bw_gbs > 0 && d->threads > 1;
  if (!cold_on && !remote_on) return NULL;
  int nv = f->inputs.len + m->params.len;
  for (int i = 0; i < f->nodes.len; i++) nv += ((IrNode *)f->nodes.items[i])->nout;
  double *last = ARENA_ARRAY(ar, double, nv + 1);
  /* shared[v]: written by an op on all the threads, not yet read by a one-thread op */
  unsigned char *shared = ARENA_ARRAY(ar, unsigned char, nv + 1);
  OpMiss *miss = ARENA_ARRAY(ar, OpMiss, f->nodes.len + 1);
  intptr_t k = 0;
  for (int i = 0; i < f->inputs.len; i++) ((IrValue *)f->inputs.items[i])->aux = (void *)++k;
  for (int i = 0; i < m->params.len; i++) ((IrValue *)m->params.items[i])->aux = (void *)++k;
  for (int i = 0; i < f->nodes.len; i++) {
    IrNode *n = f->nodes.items[i];
    for (int j = 0; j < n->nout; j++) n->out[j]->aux = (void *)++k;
  }
  for (intptr_t j = 0; j <= k; j++) last[j] = -1, shared[j] = 0; /* not touched this step */
  double clock = 0, cap = d->cache_kb * 1024, away = (d->threads - 1) / d->threads;
  for (int i = 0; i < f->nodes.len; i++) {
    const IrNode *n = f->nodes.items[i];
    miss[i].cold = miss[i].remote = 0;
    if ((ir_ops[n->op].flags & OPF_VIEW) && n->nin && n->nout) {
      intptr_t a = (intptr_t)n->in[0]->aux, b = (intptr_t)n->out[0]->aux;
      if (a > 0 && b > 0) last[b] = last[a], shared[b] = shared[a];
      continue;
    }
    bool one = one_thread(m, n);
    for (int j = 0; j < n->nin; j++) {
      intptr_t a = (intptr_t)n->in[j]->aux;
      if (a <= 0 || last[a] < 0 || clock - last[a] > cap) {
        if (cold_on) miss[i].cold += bytes_of(m, n->in[j]);
      } else if (remote_on && one && shared[a])
        miss[i].remote += away * bytes_of(m, n->in[j]);
    }
    clock += node_bytes(m, n);
    for (int j = 0; j < n->nin + n->nout; j++) {
      intptr_t a = (intptr_t)ir_node_value(n, j)->aux;
      if (a <= 0) continue;
      last[a] = clock;
      if (one)
        shared[a] = 0;
      else if (j >= n->nin)
        shared[a] = 1;
    }
  }
  for (int i = 0; i < f->inputs.len; i++) ((IrValue *)f->inputs.items[i])->aux = NULL;
  for (int i = 0; i < m->params.len; i++) ((IrValue *)m->params.items[i])->aux = NULL;
  for (int i = 0; i < f->nodes.len; i++) {
    IrNode *n = f->nodes.items[i];
    for (int j = 0; j < n->nout; j++) n->out[j]->aux = NULL;
  }
  return miss;
}

/* One op's time on its rank (not a collective); extra: bytes it moves
 * besides its operands and results (a micro-batch sum it accumulates into);
 * mg: how the backend calls it (ir/ir_merge.h): in a call of its own, as
 * the epilogue of the call before it (no time of its own), or as one more
 * tensor of that call (its work without the fixed time). */
static double op_s(const IrModule *m, const MmDevice *d, const IrNode *n, double extra,
                   const OpMiss *miss, IrMerge mg, double *flops_local) {
  const IrOpInfo *info = &ir_ops[n->op];
  *flops_local = 0;
  if ((info->flags & OPF_VIEW) || mg == IR_MERGE_EPILOGUE) return 0;
  /* a slice memplan made a view of its operand (a padded parameter's real
   * rows, ZeRO): the backend copies nothing (codegen/cg_ops.c lower_view) */
  int64_t view = mp_view_offset(m, n);
  if (view >= 0 && n->out[0]->mem_planned && n->in[0]->mem_planned &&
      n->in[0]->mem_arena == n->out[0]->mem_arena &&
      n->in[0]->mem_offset + view == n->out[0]->mem_offset)
    return 0;
  double fl = (double)ir_flops(n) / split_of(m, n), rate, over = d->op_overhead_us, work = fl;
  double items_s = 0; /* the attention's work items */
  /* one thread of the rank's (its rates measured on all of them) */
  bool one = one_thread(m, n), vec = false;
  bool bf = n->nin && n->in[0]->dtype == IR_BF16;
  double mm = (bf ? d->bf16_tflops : d->fp32_tflops) * 1e12 * d->matmul_efficiency;
  switch (info->flop_kind) {
    case IR_FL_MATMUL:
    case IR_FL_LINEAR:
    case IR_FL_LINEAR_W: rate = mm, over = d->matmul_overhead_us; break;
    case IR_FL_CONV:
    case IR_FL_CONV_X:
    case IR_FL_CONV_W: rate = mm, over = d->conv_overhead_us; break;
    case IR_FL_ATTENTION:
    case IR_FL_ATTENTION_BWD: {
      rate = mm * d->attention_efficiency, over = d->attention_overhead_us;
      const IrValue *q = n->in[info->flop_kind == IR_FL_ATTENTION ? 0 : 1];
      if (d->attention_item_us > 0 && q->shape.rank == 4) {
        IrShape qs;
        ir_local_shape(m, q->pl, &q->shape, &qs);
        items_s = mm_att_items(qs.d[0], qs.d[1], qs.d[2]) * d->attention_item_us * 1e-6;
      }
      break;
    }
    default:
      vec = true;
      rate = d->vector_tflops * 1e12;
      work = vector_work(n, fl * split_of(m, n)) / split_of(m, n);
      if (!one) over = d->parallel_overhead_us; /* else the op's fixed time, op_overhead_us */
      break;
  }
  double th = one && d->threads > 1 ? d->threads : 1;
  rate /= th, items_s *= th;
  *flops_local = fl;
  /* a one-thread vector op whose operands and results fit in the cache
   * finds them there (the op before made or read them) */
  double bytes = node_bytes(m, n) + extra;
  bool fits = one && bytes <= d->cache_kb * 1024; /* a one-thread op's data in its core's cache */
  double bw = vec && fits ? d->cache_bw_gbs : d->mem_bw_gbs;
  /* a one-thread vector op whose data fits in its core's cache meets its
   * cold operands (op_misses) a line at a time: each a miss at the next
   * level, at cold_bw_gbs, in place of their share at bw. (An op split over
   * the threads streams its operands, which the prefetchers fetch ahead:
   * mem_bw_gbs, as measured; counted cold too, GPT2Tiny's AdamW on the Xeon
   * was predicted 0.105 ms against 0.060 measured. A product's,
   * convolution's or attention's misses are in its fixed time, which mmc
   * calibrate measures with the caches so filled: its code and the
   * library's state for it miss as well.) */
  double tc = 0;
  if (vec && fits && miss && miss->cold > 0) {
    tc = miss->cold / (d->cold_bw_gbs * 1e9);
    bytes -= miss->cold;
  }
  /* a one-thread op whose data fits in its core's cache fetches its
   * operands' lines that the other threads wrote from their cores, at
   * remote_bw_gbs, besides its own time (on a 2-core Xeon the streaming
   * loop over 3 x 128 KiB took 9.2 us on one thread after the two threads
   * had written x, 4.3 after its own thread had: mmc calibrate) */
  double tr = 0;
  if (fits && miss && miss->remote > 0) tr = miss->remote / (d->remote_bw_gbs * 1e9);
  double t = work / rate, tb = bytes / (bw * 1e9) + tc;
  t = (t > tb ? t : tb) + th * scores_s(m, d, n) + kernel_rows(m, n) * d->row_ns * 1e-9 + items_s +
      tr;
  return t + ring_s(m, d, n, t) + (mg == IR_MERGE_CALL ? 0 : over * 1e-6);
}

static int axis_stride(const IrModule *m, int a) {
  return a == IR_AX_TP   ? 1
         : a == IR_AX_CP ? m->mesh[IR_AX_TP]
                         : m->mesh[IR_AX_TP] * m->mesh[IR_AX_CP];
}

/* A collective call starting at node i of f (a bucket: its run): time,
 * whether it is posted without blocking. 0 for a node inside a run. */
static double coll_s(const IrModule *m, const MmDevice *d, const IrFunc *f, int i, bool *async) {
  const IrNode *n = f->nodes.items[i];
  int run = bucket_run(f, i);
  *async = false;
  if (run == 0) return 0;
  int a = (int)n->attrs.v[IR_ATTR_MESH].i, size = m->mesh[a];
  int64_t msg = 0, sent = ir_collective_elems(m, n, &msg);
  if (bucket_id(n) >= 0) {
    for (int j = 1; j < run; j++) {
      int64_t t = 0;
      ir_collective_elems(m, f->nodes.items[i + j], &t);
      msg += t;
    }
    sent = (n->op == IR_OP_ALL_REDUCE ? 2 : 1) * msg * (size - 1) / size;
    *async = bucket_wait_index(f, bucket_id(n)) >= 0;
  }
  if (prefetch_id(n) >= 0) *async = true;
  return cost_collective_s(d, n->op, (double)sent * ir_dtype_size(n->in[0]->dtype), size,
                           axis_stride(m, a));
}

/* Samples and tokens of a step: @train's inputs hold one micro-batch; the
 * first with a dimension gives the samples, the first integer one of rank 2
 * (ids) the tokens. */
static void tokens_of(const IrFunc *f, int M, CostPrediction *o) {
  o->samples = o->tokens = 0;
  for (int i = 0; i < f->inputs.len; i++) {
    const IrValue *v = f->inputs.items[i];
    if (v->shape.rank >= 1 && !o->samples) o->samples = (int64_t)M * v->shape.d[0];
    if ((v->dtype == IR_I32 || v->dtype == IR_I64) && v->shape.rank == 2 && !o->tokens)
      o->tokens = (int64_t)M * v->shape.d[0] * v->shape.d[1];
  }
}

/* One micro-batch's clock (and, on the last, the update's) for P = 1: the
 * rank's work in node order; the non-blocking collectives (gradient
 * buckets, ZeRO-3 prefetches) queue on one channel from where they stand,
 * and a bucket_wait holds the clock until its collective is done (the
 * program's own order, passes/bucket.c). light: a micro-batch but the last,
 * where the deferred nodes (defer[i] != 0) do not run and each deferred
 * root adds its operand into its sum. */
typedef struct MbClock {
  double t, fb_end, fc, bc, uc; /* the clock, at the update, compute per phase */
  double comm_last, comm_upd;   /* collectives of the micro-batch and of the update */
  double sums;                  /* adding into the deferred sums */
  double (*by_kind)[3];         /* optional: each op kind's time, times `weight` */
  double weight;
} MbClock;

/* The bytes node i of f moves into or out of a micro-batch sum besides its
 * own: a weight-gradient matmul that accumulates into a deferred root's sum
 * reads the sum (a sum post-op, or on the last micro-batch the addend). */
static double sum_bytes(const IrModule *m, const MbDefer *md, int i) {
  if (!md->maker || md->maker[i] <= 0) return 0;
  return 4.0 * (double)ir_local_numel(m, md->roots[md->maker[i] - 1]);
}

/* A deferred root's separate add into its sum (s += c x: read two, write
 * one), 0 when its matmul accumulates into the sum itself. */
static double add_s(const IrModule *m, const MmDevice *d, const MbDefer *md, const IrNode *n,
                    int64_t node) {
  if (node < 2 || md->fused[node - 2] >= 0) return 0;
  double b = 3.0 * (double)ir_local_numel(m, n->in[0]) * ir_dtype_size(n->in[0]->dtype);
  return b / (d->mem_bw_gbs * 1e9) + d->op_overhead_us * 1e-6;
}

static bool mb_clock(const IrModule *m, const MmDevice *d, const IrFunc *f, const IrMap *uses,
                     const OpMiss *miss, int bwd, int upd, const MbDefer *md, bool light,
                     MbClock *k, char *err, size_t errn) {
  const int64_t *defer = md->node;
  double(*by_kind)[3] = k->by_kind, weight = k->weight;
  memset(k, 0, sizeof *k);
  double chan = 0, *done = NULL;
  int64_t ndone = 0;
  for (int i = 0; i < f->nodes.len; i++) {
    const IrNode *n = f->nodes.items[i];
    bool up = upd >= 0 && i >= upd, back = !up && bwd >= 0 && i >= bwd;
    if (up && upd == i) k->fb_end = k->t;
    if (light && md->once && md->once[i]) continue; /* gathered on the first micro-batch */
    if (light && defer[i]) {
      double c = add_s(m, d, md, n, defer[i]);
      k->sums += c, k->t += c;
      continue;
    }
    if (n->op == IR_OP_BUCKET_WAIT) {
      int64_t id = n->attrs.v[IR_ATTR_BUCKET].i;
      if (id >= 0 && id < ndone && done[id] > k->t) k->t = done[id];
      continue;
    }
    if (ir_op_is_collective(n->op)) {
      bool async;
      double c = coll_s(m, d, f, i, &async);
      if (up)
        k->comm_upd += c;
      else
        k->comm_last += c;
      int64_t id = async ? async_slot(n) : -1;
      if (id < 0 || id > (1 << 24)) {
        k->t += c;
        continue;
      }
      if (id >= ndone) {
        int64_t nn = 2 * id + 16;
        double *nd = realloc(done, (size_t)nn * sizeof *nd);
        if (!nd) {
          free(done);
          snprintf(err, errn, "out of memory");
          return false;
        }
        for (int64_t j = ndone; j < nn; j++) nd[j] = 0;
        done = nd, ndone = nn;
      }
      chan = (chan > k->t ? chan : k->t) + c;
      done[id] = chan;
      /* the share of it the compute loses (comm_compute_share: on a CPU,
       * MPI's copies and sums run on the cores that compute; 0 on a GPU):
       * exposed communication, as the step's time less compute counts it */
      k->t += d->comm_compute_share * c;
      continue;
    }
    double fl, c = op_s(m, d, n, sum_bytes(m, md, i), miss ? &miss[i] : NULL,
                        ir_merged_into_prev(m, f, i, uses), &fl);
    k->t += c;
    if (up)
      k->uc += c;
    else if (back)
      k->bc += c;
    else
      k->fc += c;
    if (by_kind && !(light && up)) by_kind[n->op][up ? 2 : back ? 1 : 0] += weight * c;
  }
  free(done);
  if (upd < 0) k->fb_end = k->t;
  return true;
}

bool cost_predict(IrModule *m, const MmDevice *d, CostPrediction *o, char *err, size_t errn) {
  double(*by_kind)[3] = o->by_kind;
  memset(o, 0, sizeof *o);
  /* a rank whose whole step's data (its arenas: parameters, gradients,
   * optimizer state, activations) fits in its share of the last-level
   * cache streams it from there: every memory-bound charge at llc_bw_gbs
   * (on a Xeon with 240 MiB a rank, GPT2Tiny dp = 2's AdamW ran at 32 to 44
   * GB/s a rank where streaming 96 MiB a rank gave 19) */
  MmDevice dl;
  MpSummary ms;
  char me[128];
  if (d->llc_kb > 0 && d->llc_bw_gbs > d->mem_bw_gbs && mp_summarize(m, &ms, me, sizeof me) &&
      (double)ms.total <= d->llc_kb * 1024) {
    dl = *d;
    dl.mem_bw_gbs = d->llc_bw_gbs;
    d = &dl;
  }
  if (by_kind) memset(by_kind, 0, sizeof(double[3]) * IR_OP_COUNT), o->by_kind = by_kind;
  IrFunc *f = ir_module_func(m, "train");
  if (!f) {
    snprintf(err, errn, "no @train to predict (a training program's step)");
    return false;
  }
  int P = m->plan.pp > 1 ? m->plan.pp : 1,
      M = m->plan.micro_batches > 1 ? m->plan.micro_batches : 1;
  o->devices = ir_world_size(m) * P;
  bool bf16 = m->train.precision == MM_PREC_BF16;
  o->peak_tflops = bf16 ? d->bf16_tflops : d->fp32_tflops;
  tokens_of(f, M, o);
  int bwd = -1, upd = -1;
  ir_train_phases(f, &bwd, &upd);
  /* The model's FLOPs: the forward and the backward's ops that carry the
   * loss's gradient (read the seed at bwd, directly or not); the backward's
   * other ops read forward values only: recomputation's clones. So a frozen
   * sub-model nothing trainable precedes costs its forward alone, and a
   * plan's recompute never changes them (3x the forward was neither). */
  double fwd_flops = 0, fb_flops = 0, upd_flops = 0, grad_flops = 0;
  for (int i = 0; i < f->nodes.len; i++) ((IrNode *)f->nodes.items[i])->aux = NULL;
  for (int i = 0; i < f->nodes.len; i++) {
    IrNode *n = f->nodes.items[i];
    double g = (double)ir_flops(n);
    if (upd >= 0 && i >= upd)
      upd_flops += g;
    else {
      fb_flops += g;
      if (bwd < 0 || i < bwd)
        fwd_flops += g;
      else {
        bool carries = i == bwd;
        for (int k = 0; k < n->nin && !carries; k++) carries = n->in[k]->def && n->in[k]->def->aux;
        if (carries) n->aux = n, grad_flops += g;
      }
    }
  }
  for (int i = 0; i < f->nodes.len; i++) ((IrNode *)f->nodes.items[i])->aux = NULL;
  o->flops_step = M * fb_flops + upd_flops;
  o->model_flops = M * (fwd_flops + grad_flops);

  if (P <= 1) {
    /* M > 1, dp > 1: the dp gradient reductions run on the last
     * micro-batch only (passes/accum.h); the others add their local
     * gradients into sums instead (a memory-bound axpy a deferred root) */
    Arena ar;
    arena_init(&ar);
    unsigned char *upm = ARENA_ARRAY(&ar, unsigned char, f->nodes.len + 1);
    ir_update_part(f, upd >= 0 ? upd : f->nodes.len, &ar, upm);
    MbDefer md;
    mb_defer_plan(m, f, upm, &ar, &md);
    IrMap uses;
    ir_use_counts(f, &ar, &uses);
    MbClock full = {.by_kind = by_kind, .weight = 1}, light = {.by_kind = by_kind, .weight = M - 1};
    OpMiss *miss = op_misses(m, d, f, &ar);
    bool ok = mb_clock(m, d, f, &uses, miss, bwd, upd, &md, false, &full, err, errn) &&
              mb_clock(m, d, f, &uses, miss, bwd, upd, &md, true, &light, err, errn);
    arena_free(&ar);
    if (!ok) return false;
    /* the forward and backward M times (M - 1 of them without the deferred
     * reductions), the update (and the waits before it) once */
    o->comm_s = full.comm_last + (M - 1) * light.comm_last + full.comm_upd;
    o->compute_s = M * (full.fc + full.bc) + (M - 1) * light.sums;
    o->optimizer_s = full.uc;
    o->step_s = (M - 1) * light.fb_end + full.fb_end + (full.t - full.fb_end);
    o->exposed_comm_s = o->step_s - o->compute_s - o->optimizer_s;
    if (o->exposed_comm_s < 1e-9 * o->step_s) o->exposed_comm_s = 0; /* rounding */
  } else {
    PpAssign a;
    if (!pp_facts(m, f, &a, err, errn)) return false;
    int S = a.nstages;
    double *cost = calloc((size_t)(5 * S), sizeof *cost), *comm = cost + 3 * S,
           *comp = cost + 4 * S;
    double uc = 0, ucomm = 0, xbytes = 0, xchunk = 0, *dcomm = calloc((size_t)S + 1, sizeof *dcomm),
           *gcomm = calloc((size_t)P + 1, sizeof *gcomm);
    /* the dp reductions deferred to each stage's last W part (passes/accum.h):
     * once a step, after the schedule; the sums' axpy every micro-batch */
    Arena ar;
    arena_init(&ar);
    unsigned char *upm = ARENA_ARRAY(&ar, unsigned char, f->nodes.len + 1);
    for (int i = 0; i < f->nodes.len; i++) upm[i] = a.part[i] == PPN_U;
    MbDefer md;
    mb_defer_plan(m, f, upm, &ar, &md);
    IrMap uses;
    ir_use_counts(f, &ar, &uses);
    OpMiss *miss = op_misses(m, d, f, &ar);
    /* aux: the forward stage + 1 that makes a value (0: none), cleared after */
    for (int i = 0; i < f->inputs.len; i++) ((IrValue *)f->inputs.items[i])->aux = NULL;
    for (int i = 0; i < m->params.len; i++) ((IrValue *)m->params.items[i])->aux = NULL;
    for (int i = 0; i < f->nodes.len; i++) {
      IrNode *n = f->nodes.items[i];
      for (int j = 0; j < n->nout; j++)
        n->out[j]->aux = (void *)(intptr_t)(a.part[i] == PPN_F ? a.stage[i] + 1 : 0);
    }
    IrMap sent;
    ir_map_init(&sent, &ar, true);
    for (int i = 0; i < f->nodes.len; i++) {
      IrNode *n = f->nodes.items[i];
      if (a.part[i] == PPN_F)
        for (int j = 0; j < n->nin; j++) {
          intptr_t s = (intptr_t)n->in[j]->aux;
          /* as the trainer sends it (codegen/cg_pp.c): once per value and
           * receiving rank, nothing between a rank's own virtual stages */
          if (s <= 0 || (s - 1) % P == a.stage[i] % P || n->in[j]->role == IR_ROLE_PARAM) continue;
          char key[64];
          snprintf(key, sizeof key, "%p>%d", (const void *)n->in[j], a.stage[i] % P);
          if (ir_map_get(&sent, key)) continue;
          ir_map_put(&sent, arena_strdup(&ar, key));
          *(tp_chunked(m, n->in[j]) ? &xchunk : &xbytes) +=
              (double)ir_local_numel(m, n->in[j]) * ir_dtype_size(n->in[j]->dtype);
        }
      double t, fl;
      bool is_comm = ir_op_is_collective(n->op);
      if (md.once[i] && gcomm) {
        /* a parameter gathered once a step (passes/accum.h): the trainer
         * gathers each rank's before the schedule (runtime/comm/mmrt_pp.c
         * gather_once), all ranks at once; gcomm, per rank, delays its
         * first forward where the fill has not already (below) */
        bool async;
        t = coll_s(m, d, f, i, &async);
        o->comm_s += t;
        gcomm[a.stage[i] % P] += t;
        continue;
      }
      if (md.node[i] && dcomm) {
        cost[2 * S + a.stage[i]] += add_s(m, d, &md, n, md.node[i]);
        if (n->op == IR_OP_BUCKET_WAIT) continue;
        bool async;
        t = coll_s(m, d, f, i, &async);
        o->comm_s += t;
        dcomm[a.stage[i]] += t;
        continue;
      }
      if (is_comm) {
        bool async;
        t = coll_s(m, d, f, i, &async);
        o->comm_s += (a.part[i] == PPN_U ? 1 : M) * t;
      } else {
        /* merged into the call before it when that runs on the same rank */
        IrMerge mg = ir_merged_into_prev(m, f, i, &uses);
        if (mg != IR_MERGE_NONE && a.stage[i] % P != a.stage[i - 1] % P) mg = IR_MERGE_NONE;
        t = op_s(m, d, n, sum_bytes(m, &md, i), miss ? &miss[i] : NULL, mg, &fl);
      }
      if (a.part[i] == PPN_U) {
        if (is_comm)
          ucomm += t;
        else
          uc += t;
        continue;
      }
      int k = a.part[i] == PPN_F ? 0 : a.part[i] == PPN_I ? 1 : 2;
      cost[k * S + a.stage[i]] += t;
      (is_comm ? comm : comp)[a.stage[i]] += t;
    }
    for (int i = 0; i < f->nodes.len; i++) {
      IrNode *n = f->nodes.items[i];
      for (int j = 0; j < n->nout; j++) n->out[j]->aux = NULL;
    }
    for (int i = 0; i < m->params.len; i++) ((IrValue *)m->params.items[i])->aux = NULL;
    for (int k = 0; k < 3 * S; k++)
      if (cost[k] <= 0) cost[k] = 1e-9;
    int stride = m->mesh[IR_AX_TP] * m->mesh[IR_AX_CP] * m->mesh[IR_AX_DP];
    /* a transfer: the values sent whole, and those replicated over tp in
     * tp chunks, each tp rank's over its own adapter (bytes / tp each),
     * then all-gathered over tp by the receivers (docs/pp-transfers.md) */
    int tp = m->mesh[IR_AX_TP];
    double whole = S > 1 ? xbytes / (S - 1) : 0, split = S > 1 ? xchunk / (S - 1) : 0;
    o->pp_xfer_bytes = whole + split;
    o->pp_xfer_rank_bytes = whole + split / tp;
    o->pp_xfer_send_s = cost_collective_s(d, IR_OP_COUNT, o->pp_xfer_rank_bytes, 2, stride);
    o->pp_xfer_gather_s =
        split > 0 ? cost_collective_s(d, IR_OP_ALL_GATHER, split * (tp - 1) / tp, tp, 1) : 0;
    double xfer = o->pp_xfer_send_s + o->pp_xfer_gather_s;
    PpSchedule s;
    bool ok = pp_sched_build(&s, (PpSchedKind)m->plan.schedule, P, S / P, M, err, errn);
    if (ok) {
      pp_sched_add_comms(&s);
      PpCosts c = {cost, cost + S, cost + 2 * S, xfer};
      PpSim sim;
      ok = pp_sched_simulate(&s, &c, &sim);
      if (!ok) snprintf(err, errn, "the schedule's simulation failed: %s", sim.msg);
      if (ok) {
        int r0 = 0;
        for (int r = 1; r < P; r++)
          if (sim.busy[r] > sim.busy[r0]) r0 = r;
        double cc = 0, cm = 0, dc = 0;
        for (int st = r0; st < S; st += P) cc += comp[st], cm += comm[st], dc += dcomm[st];
        o->compute_s = M * cc;
        /* the once-a-step gathers: a rank starts its first forward after
         * its gathers and its input, so what they add is the most any rank's
         * exceed the start the simulation gives its first forward */
        double gx = 0;
        for (int r = 0; r < P; r++)
          for (int k = 0; gcomm && k < s.n[r]; k++)
            if (s.act[r][k].kind == PP_F) {
              double late = gcomm[r] - sim.start[r][k];
              gx = late > gx ? late : gx;
              break;
            }
        o->exposed_comm_s = M * cm + ucomm + dc + gx;
        o->bubble_s = sim.makespan - sim.busy[r0];
        if (o->bubble_s < 0) o->bubble_s = 0;
        o->optimizer_s = uc / P;
        o->step_s = sim.makespan + o->optimizer_s + ucomm + dc + gx;
        pp_sim_free(&sim, P);
      }
      pp_sched_free(&s);
    }
    free(cost);
    free(dcomm);
    free(gcomm);
    arena_free(&ar);
    pp_assign_free(&a);
    if (!ok) return false;
  }
  if (o->step_s > 0) {
    o->tflops_per_device = o->flops_step / o->step_s / o->devices / 1e12;
    o->mfu = o->model_flops / o->step_s / o->devices / (o->peak_tflops * 1e12);
  }
  return true;
}

double cost_op_s(const IrModule *m, const MmDevice *d, const IrFunc *f, int i, const IrMap *uses) {
  double fl;
  const IrNode *n = f->nodes.items[i];
  return ir_op_is_collective(n->op)
             ? 0
             : op_s(m, d, n, 0, NULL, ir_merged_into_prev(m, f, i, uses), &fl);
}
