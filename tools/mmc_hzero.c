/* `mmc plan`'s account of hierarchical ZeRO (docs/hzero.md).  The IR holds
 * flat ZeRO over dp; the runtime (runtime/comm/mmrt_hzero.c) runs each dp
 * all-gather and reduce-scatter in two levels over node groups of N dp
 * ranks, K = dp / N of them.  For a call whose whole tensor on dp has F
 * elements (per rank of the other axes):
 *   all-gather:     within the group (dp_node) of F elements, every call;
 *                   across the groups (dp_cross) of F / N, only the first
 *                   gather of a parameter in a step (its node copy lives
 *                   until the update);
 *   reduce-scatter: dp_node of F, then dp_cross of F / N (a gradient bucket
 *                   is one call of each).
 * Elements are the whole tensor of the call, as the runtime's counters
 * count them; sent is (n - 1) / n of it on an axis of n ranks.  The node
 * copies: F / N elements of every parameter stored split over dp. */
#include "tools/mmc_hzero.h"

#include <string.h>

#include "passes/bucket.h"

typedef struct Level {
  const char *kind, *axis;
  int calls;
  int64_t elems, sent;
} Level;

void mmc_plan_hzero(const IrModule *m, json_object *root) {
  if (!m->plan.zero_across) return;
  const IrFunc *f = NULL;
  for (int i = 0; i < m->funcs.len; i++)
    if (!strcmp(((const IrFunc *)m->funcs.items[i])->name, "train")) f = m->funcs.items[i];
  const int64_t D = m->mesh[IR_AX_DP], N = m->plan.ranks_per_node / (m->plan.tp * m->plan.cp),
                K = D / N;
  Level lv[4] = {{.kind = "all_gather", .axis = "dp_node"},
                 {.kind = "all_gather", .axis = "dp_cross"},
                 {.kind = "reduce_scatter", .axis = "dp_node"},
                 {.kind = "reduce_scatter", .axis = "dp_cross"}};
  const IrValue *seen[4096];
  int nseen = 0;
  for (int i = 0; f && i < f->nodes.len; i++) {
    const IrNode *n = f->nodes.items[i];
    if ((n->op != IR_OP_ALL_GATHER && n->op != IR_OP_REDUCE_SCATTER) ||
        n->attrs.v[IR_ATTR_MESH].i != IR_AX_DP)
      continue;
    int run = bucket_run(f, i);
    if (run == 0) continue;
    int64_t F = 0;
    for (int j = 0; j < run; j++) {
      const IrNode *u = f->nodes.items[i + j];
      F += ir_local_numel(m, u->op == IR_OP_ALL_GATHER ? u->out[0] : u->in[0]);
    }
    Level *a = &lv[n->op == IR_OP_ALL_GATHER ? 0 : 2];
    a[0].calls++, a[0].elems += F, a[0].sent += F * (N - 1) / N;
    bool cross = n->op == IR_OP_REDUCE_SCATTER;
    if (!cross) { /* the first gather of the parameter this step */
      cross = true;
      for (int k = 0; k < nseen && cross; k++) cross = seen[k] != n->in[0];
      if (cross && nseen < (int)(sizeof seen / sizeof *seen)) seen[nseen++] = n->in[0];
    }
    if (cross) a[1].calls++, a[1].elems += F / N, a[1].sent += F / N * (K - 1) / K;
  }
  int64_t copies = 0;
  for (int i = 0; i < m->params.len; i++) {
    const IrValue *p = m->params.items[i];
    if (p->role == IR_ROLE_PARAM && p->pl[IR_AX_DP].kind == IR_PL_S)
      copies += ir_local_numel(m, p) * K * ir_dtype_size(p->dtype);
  }
  if (root) {
    json_object *o = json_object_new_object(), *l = json_object_new_array();
    json_object_object_add(o, "zero", json_object_new_int(m->plan.zero));
    json_object_object_add(o, "zero_across", json_object_new_int(m->plan.zero_across));
    json_object_object_add(o, "node_dp_ranks", json_object_new_int64(N));
    json_object_object_add(o, "node_groups", json_object_new_int64(K));
    json_object_object_add(o, "node_copy_bytes", json_object_new_int64(copies));
    for (int k = 0; k < 4; k++) {
      json_object *e = json_object_new_object();
      json_object_object_add(e, "kind", json_object_new_string(lv[k].kind));
      json_object_object_add(e, "axis", json_object_new_string(lv[k].axis));
      json_object_object_add(e, "calls", json_object_new_int(lv[k].calls));
      json_object_object_add(e, "elements", json_object_new_int64(lv[k].elems));
      json_object_object_add(e, "sent_elements", json_object_new_int64(lv[k].sent));
      json_object_array_add(l, e);
    }
    json_object_object_add(o, "levels", l);
    json_object_object_add(root, "hzero", o);
    return;
  }
  printf("  hierarchical ZeRO: zero = %d within %lld node groups of %lld dp ranks, ZeRO-1 across "
         "them; the dp all-gathers and reduce-scatters above run in two levels, per step:\n",
         m->plan.zero, (long long)K, (long long)N);
  for (int k = 0; k < 4; k++)
    printf("    %-15s %-8s %5d calls %14lld elements %14lld elements sent\n", lv[k].kind,
           lv[k].axis, lv[k].calls, (long long)lv[k].elems, (long long)lv[k].sent);
  printf("  node copies: %lld bytes a rank (1/%lld of each parameter stored over dp, gathered "
         "across the groups once a step; held by the runtime beside the arenas)\n",
         (long long)copies, (long long)N);
}

bool mmc_zero_padded(const IrModule *m, const IrValue *p) {
  if (!p->rows || p->shape.rank < 1 || p->rows >= p->shape.d[0]) return false;
  return m->plan.tp <= 1 || p->shape.d[0] % (128 * (int64_t)m->plan.tp) != 0;
}

/* A parameter without a dim that dp divides is padded along dim 0
 * (passes/zero.c) unless another axis splits that dim, or it is a scalar:
 * those stay whole on every dp rank (docs/planner.md, "ZeRO and
 * indivisible parameters"); say so, with what it costs, rather than print
 * a ZeRO plan that does not shard them. */
void mmc_plan_zero_replicated(const IrModule *m, json_object *root) {
  const int64_t D = m->mesh[IR_AX_DP];
  if (m->plan.zero < 1 || D <= 1) return;
  const IrFunc *f = NULL;
  for (int i = 0; i < m->funcs.len; i++)
    if (!strcmp(((const IrFunc *)m->funcs.items[i])->name, "train")) f = m->funcs.items[i];
  int tensors = 0, trainable = 0, npad = 0;
  int64_t elems = 0, bytes = 0, pad_elems = 0;
  const char *first = NULL;
  for (int i = 0; f && i < f->nodes.len; i++) {
    const IrNode *n = f->nodes.items[i];
    if (!(ir_ops[n->op].flags & OPF_OPTIMIZER) || n->nin < 1 || n->in[0]->role != IR_ROLE_PARAM)
      continue;
    const IrValue *p = n->in[0];
    trainable++;
    if (mmc_zero_padded(m, p)) { /* its padding rows, over the dp group (a vocabulary's too) */
      npad++;
      pad_elems += ir_local_numel(m, p) / (p->shape.d[0] / D) * (p->shape.d[0] - p->rows);
    }
    if (p->pl[IR_AX_DP].kind != IR_PL_B) continue;
    tensors++, elems += ir_local_numel(m, p),
        bytes += ir_local_numel(m, p) * ir_dtype_size(p->dtype);
    if (!first) first = p->name;
  }
  if (npad && root) {
    json_object *o = json_object_new_object();
    json_object_object_add(o, "tensors", json_object_new_int(npad));
    json_object_object_add(o, "padding_elements", json_object_new_int64(pad_elems));
    json_object_object_add(root, "zero_padded", o);
  } else if (npad) {
    printf("  zero = %d pads %d of %d trainable parameters along dim 0 to a multiple of dp = %lld "
           "(dp divides none of their dims): %lld elements of padding over the dp ranks, never "
           "trained or saved\n",
           m->plan.zero, npad, trainable, (long long)D, (long long)pad_elems);
  }
  if (!tensors) return;
  if (root) {
    json_object *o = json_object_new_object();
    json_object_object_add(o, "tensors", json_object_new_int(tensors));
    json_object_object_add(o, "trainable_tensors", json_object_new_int(trainable));
    json_object_object_add(o, "elements", json_object_new_int64(elems));
    json_object_object_add(o, "param_bytes", json_object_new_int64(bytes));
    json_object_object_add(o, "first", json_object_new_string(first));
    json_object_object_add(root, "zero_replicated", o);
    return;
  }
  printf("  zero = %d leaves %d of %d trainable parameters whole on every dp rank (%lld elements, "
         "%lld bytes a rank, each with its gradient and optimizer state; gradients all-reduced): "
         "dp = %lld divides none of their dims and another axis splits their dim 0 (no "
         "padding), e.g. @%s\n",
         m->plan.zero, tensors, trainable, (long long)elems, (long long)bytes, (long long)D, first);
}
