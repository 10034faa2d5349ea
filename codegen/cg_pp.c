/* Micro-batches (issue 11): with micro_batches = M > 1 the train step is
 * two functions of @train, cut at the update (ir_train_phases): the forward
 * and backward of one micro-batch (mm_train_step, every node before the
 * first gradient-norm or optimizer op) and the update (mm_update_step, the
 * rest). The trainer runs the first M times per step and sums what the
 * update reads from it (the gradients: `accum` in the descriptor), weighted
 * by each micro-batch's share of the labels, before it runs the update. */
#include <string.h>

#include "cg_internal.h"

bool cg_mb_build(Cg *cg, const IrFunc *f, CgMb *out) {
  memset(out, 0, sizeof *out);
  out->M = cg->m->plan.micro_batches;
  int bwd = -1, upd = -1;
  ir_train_phases(f, &bwd, &upd);
  if (upd < 0) upd = f->nodes.len;
  unsigned char *mb = ARENA_ARRAY(cg->a, unsigned char, f->nodes.len + 1);
  unsigned char *up = ARENA_ARRAY(cg->a, unsigned char, f->nodes.len + 1);
  /* the update: the norm, clipping and optimizer ops and what reads them;
   * a node after the first of them that does not (the loss's all-reduce
   * over dp) belongs to the micro-batch */
  IrMap made, late;
  ir_map_init(&made, cg->a, false);
  ir_map_init(&late, cg->a, false);
  for (int i = 0; i < f->nodes.len; i++) {
    const IrNode *n = f->nodes.items[i];
    bool u = i >= upd && (n->op == IR_OP_GRAD_NORM || n->op == IR_OP_CLIP_SCALE ||
                          (ir_ops[n->op].flags & OPF_OPTIMIZER));
    for (int k = 0; k < n->nin && i >= upd && !u; k++) u = ir_map_get(&late, n->in[k]) != NULL;
    mb[i] = !u, up[i] = u;
    for (int j = 0; j < n->nout; j++) ir_map_put(u ? &late : &made, n->out[j]);
    if (u && (ir_op_is_collective(n->op) || n->op == IR_OP_BUCKET_WAIT))
      return cg_error(cg, n, "micro_batches: a collective in the update");
  }
  out->accum = ARENA_ARRAY(cg->a, const IrValue *, f->nodes.len + 1);
  IrMap seen;
  ir_map_init(&seen, cg->a, false);
  for (int i = upd; i < f->nodes.len; i++) {
    const IrNode *n = f->nodes.items[i];
    if (!up[i]) continue;
    for (int k = 0; k < n->nin; k++) {
      const IrValue *v = n->in[k];
      if (!ir_map_get(&made, v) || ir_map_get(&seen, v)) continue;
      ir_map_put(&seen, v);
      if (v->role != IR_ROLE_GRAD || !v->grad_of)
        return cg_error(cg, n,
                        "micro_batches: the update reads a value of the backward that is not a "
                        "parameter's gradient (operand %d of %s)",
                        k, ir_ops[n->op].name);
      out->accum[out->naccum++] = v;
    }
  }
  out->fb = cg_build_step(cg, f, "mm_train_step", true, mb);
  if (!out->fb) return false;
  out->upd = cg_build_step(cg, f, "mm_update_step", true, up);
  return out->upd != NULL;
}
