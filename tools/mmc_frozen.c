/* `mmc plan`'s account of frozen parameters (docs/freeze.md).
 *
 * A frozen parameter gets no gradient (autodiff stops where nothing
 * trainable is upstream), no optimizer state and no data-parallel
 * gradient collective.  The figures are what the same parameters would
 * take if they trained under this plan with zero = 0: per rank, a gradient
 * of the parameter's local size, the optimizer's states (AdamW's m and v,
 * SGD's momentum) of that size each, and each step the dp all-reduce of
 * the gradient, 2 (dp - 1) / dp of it sent.  The backward's nodes in the
 * frozen modules are counted from @train: 0 when nothing upstream of the
 * frozen modules trains. */
#include "tools/mmc_frozen.h"

#include <string.h>

#include "passes/memplan.h"

/* Is name (a parameter or a node's scope) under one of the freeze entries? */
static bool under_frozen(const IrModule *m, const char *name) {
  for (int i = 0; name && i < m->train.nfreeze; i++) {
    size_t n = strlen(m->train.freeze[i]);
    if (!strncmp(name, m->train.freeze[i], n) && (name[n] == 0 || name[n] == '.')) return true;
  }
  return false;
}

void mmc_plan_frozen(const IrModule *m, json_object *root) {
  int64_t params = 0, bytes = 0;
  int tensors = 0;
  for (int i = 0; i < m->params.len; i++) {
    const IrValue *p = m->params.items[i];
    if (p->role != IR_ROLE_PARAM || !p->frozen) continue;
    params += ir_numel(&p->shape), bytes += mp_value_bytes(m, p), tensors++;
  }
  if (!tensors) return;
  int nstates = m->train.optim == MM_OPT_ADAMW ? 2 : 1, dp = m->mesh[IR_AX_DP];
  int64_t grad = bytes, opt = nstates * bytes, sent = dp > 1 ? 2 * bytes * (dp - 1) / dp : 0;
  int bwd_nodes = 0, fwd_nodes = 0;
  const IrFunc *f = NULL;
  for (int i = 0; i < m->funcs.len; i++)
    if (!strcmp(((const IrFunc *)m->funcs.items[i])->name, "train")) f = m->funcs.items[i];
  if (f) {
    int bwd = -1, upd = -1;
    ir_train_phases(f, &bwd, &upd);
    for (int i = 0; i < f->nodes.len; i++) {
      const IrNode *n = f->nodes.items[i];
      if (!under_frozen(m, n->scope)) continue;
      if (bwd >= 0 && i >= bwd && (upd < 0 || i < upd))
        bwd_nodes++;
      else if (bwd < 0 || i < bwd)
        fwd_nodes++;
    }
  }
  if (root) {
    json_object *o = json_object_new_object(), *names = json_object_new_array();
    for (int i = 0; i < m->train.nfreeze; i++)
      json_object_array_add(names, json_object_new_string(m->train.freeze[i]));
    json_object_object_add(o, "modules", names);
    json_object_object_add(o, "params", json_object_new_int64(params));
    json_object_object_add(o, "tensors", json_object_new_int(tensors));
    json_object_object_add(o, "param_bytes", json_object_new_int64(bytes));
    json_object_object_add(o, "grad_bytes_saved", json_object_new_int64(grad));
    json_object_object_add(o, "opt_bytes_saved", json_object_new_int64(opt));
    json_object_object_add(o, "dp_bytes_saved_per_step", json_object_new_int64(sent));
    json_object_object_add(o, "forward_nodes", json_object_new_int(fwd_nodes));
    json_object_object_add(o, "backward_nodes", json_object_new_int(bwd_nodes));
    json_object_object_add(root, "frozen", o);
    return;
  }
  printf("  frozen:");
  for (int i = 0; i < m->train.nfreeze; i++) printf("%s %s", i ? "," : "", m->train.freeze[i]);
  printf(": %lld parameters in %d tensors (%lld bytes a rank) take no gradient (%lld bytes), no "
         "optimizer state (%lld bytes) and no gradient collectives (%lld bytes sent a step over "
         "dp = %d); @train has %d backward nodes in them (%d forward)\n",
         (long long)params, tensors, (long long)bytes, (long long)grad, (long long)opt,
         (long long)sent, dp, bwd_nodes, fwd_nodes);
}
