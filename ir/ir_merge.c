/* The nodes done inside an earlier node's call: ir/ir_merge.h. */
#include "ir_merge.h"

#include <string.h>

void ir_use_counts(const IrFunc *f, Arena *a, IrMap *uses) {
  ir_map_init(uses, a, false);
  for (int i = 0; i < f->nodes.len; i++) {
    const IrNode *n = f->nodes.items[i];
    for (int k = 0; k < n->nin; k++) ir_map_put(uses, n->in[k])->i++;
  }
  for (int i = 0; i < f->results.len; i++) ir_map_put(uses, f->results.items[i])->i++;
}

static IrShape local(const IrModule *m, const IrValue *v) {
  IrShape s;
  ir_local_shape(m, v->pl, &v->shape, &s);
  return s;
}

static bool same_local_shape(const IrModule *m, const IrValue *a, const IrValue *b) {
  IrShape x = local(m, a), y = local(m, b);
  return ir_shape_eq(&x, &y);
}

static int64_t local_last_dim(const IrModule *m, const IrValue *v) {
  IrShape s = local(m, v);
  return s.rank ? s.d[s.rank - 1] : 1;
}

static bool overlaps(const IrModule *m, const IrValue *a, const IrValue *b) {
  if (a->mem_arena != b->mem_arena) return false;
  int64_t ea = a->mem_offset + ir_local_numel(m, a) * ir_dtype_size(a->dtype);
  int64_t eb = b->mem_offset + ir_local_numel(m, b) * ir_dtype_size(b->dtype);
  return a->mem_offset < eb && b->mem_offset < ea;
}

/* v's dim d split over a mesh axis of more than one rank */
static bool split_on_mesh(const IrModule *m, const IrValue *v, int d) {
  for (int a = 0; a < IR_NAXES; a++)
    if (v->pl[a].kind == IR_PL_S && v->pl[a].dim == d && m->mesh[a] > 1) return true;
  return false;
}

static bool read_once(const IrMap *uses, const IrValue *v) {
  IrMapSlot *u = ir_map_get(uses, v);
  return u && u->i == 1;
}

static const char *const cast_add = "t0 = cast(i0) {dtype = f32}; t1 = add(t0, i1)";

static bool is_cast_add(const IrNode *a) {
  const char *prog = a->attrs.v[IR_ATTR_PROG].s;
  return a->op == IR_OP_FUSED && prog && strcmp(prog, cast_add) == 0;
}

/* node i and the node after it, when there is one */
static bool pair(const IrFunc *f, int i, const IrNode **n, const IrNode **a) {
  if (i < 0 || i + 1 >= f->nodes.len) return false;
  *n = f->nodes.items[i], *a = f->nodes.items[i + 1];
  return (*n)->nout >= 1 && (*a)->nout >= 1;
}

const IrValue *ir_linear_bias_next(const IrModule *m, const IrFunc *f, int i, const IrMap *uses) {
  const IrNode *n, *a;
  if (!pair(f, i, &n, &a) || n->op != IR_OP_LINEAR) return NULL;
  const IrValue *y = n->out[0];
  if (a->op != IR_OP_ADD || a->nin != 2 || !read_once(uses, y) ||
      a->out[0]->mem_arena != y->mem_arena || a->out[0]->mem_offset != y->mem_offset ||
      !same_local_shape(m, a->out[0], y))
    return NULL;
  const IrValue *b = a->in[0] == y ? a->in[1] : a->in[1] == y ? a->in[0] : NULL;
  if (!b || b == y || b->dtype != IR_F32 || b->shape.rank != 1 ||
      local_last_dim(m, b) != local_last_dim(m, y))
    return NULL;
  return b;
}

const IrValue *ir_f32_dest_next(const IrModule *m, const IrFunc *f, int i, const IrMap *uses,
                                const IrValue **bias) {
  *bias = NULL;
  const IrNode *n, *a;
  if (!pair(f, i, &n, &a) || n->nin < 1 || n->in[0]->dtype != IR_BF16 ||
      (n->op != IR_OP_LINEAR && n->op != IR_OP_LINEAR_GRAD_X && n->op != IR_OP_LINEAR_GRAD_W))
    return NULL;
  const IrValue *y = n->out[0];
  if (!read_once(uses, y) || a->nin < 1 || a->in[0] != y || a->nout != 1 ||
      a->out[0]->dtype != IR_F32 || !same_local_shape(m, a->out[0], y))
    return NULL;
  if (a->op == IR_OP_CAST) {
    if (a->nin != 1) return NULL;
  } else if (n->op == IR_OP_LINEAR && a->nin == 2 && is_cast_add(a)) {
    const IrValue *b = a->in[1];
    if (b->dtype != IR_F32 || b->shape.rank != 1 || local_last_dim(m, b) != local_last_dim(m, y))
      return NULL;
    *bias = b;
  } else {
    return NULL;
  }
  for (int k = 0; k < n->nin; k++)
    if (overlaps(m, a->out[0], n->in[k])) return *bias = NULL, NULL;
  if (*bias && overlaps(m, a->out[0], *bias)) return *bias = NULL, NULL;
  return a->out[0];
}

const IrValue *ir_residual_next(const IrModule *m, const IrFunc *f, int i, const IrMap *uses) {
  const IrNode *n, *a;
  if (!pair(f, i, &n, &a) || n->op != IR_OP_LAYER_NORM_GRAD || n->nin < 2) return NULL;
  const IrValue *x = n->in[1];
  if (split_on_mesh(m, x, ir_norm_dim(&n->attrs, &x->shape))) return NULL;
  const IrValue *dx = n->out[0];
  if (a->op != IR_OP_ADD || a->nin != 2 || !read_once(uses, dx)) return NULL;
  const IrValue *r = a->in[0] == dx ? a->in[1] : a->in[1] == dx ? a->in[0] : NULL;
  const IrValue *y = a->out[0];
  if (!r || r == dx || r->dtype != IR_F32 || dx->dtype != IR_F32 || !same_local_shape(m, r, dx) ||
      !same_local_shape(m, y, dx) || y->mem_arena != r->mem_arena || y->mem_offset != r->mem_offset)
    return NULL;
  for (int k = 0; k < n->nin; k++)
    if (overlaps(m, y, n->in[k])) return NULL;
  for (int j = 1; j < n->nout; j++)
    if (overlaps(m, y, n->out[j])) return NULL;
  return y;
}

const IrValue *ir_grad_sum_next(const IrModule *m, const IrFunc *f, int i, const IrMap *uses,
                                const IrValue **base) {
  *base = NULL;
  const IrNode *n, *a;
  if (!pair(f, i, &n, &a) || n->op != IR_OP_EMBEDDING_GRAD || split_on_mesh(m, n->out[0], 0))
    return NULL;
  const IrValue *g = n->out[0], *b = NULL, *y = a->out[0];
  if (!read_once(uses, g) || a->nin != 2 || a->nout != 1 || g->dtype != IR_F32) return NULL;
  if (a->op == IR_OP_ADD) {
    b = a->in[0] == g ? a->in[1] : a->in[1] == g ? a->in[0] : NULL;
    if (!b || b == g || b->dtype != IR_F32) return NULL;
  } else if (is_cast_add(a) && a->in[1] == g && a->in[0]->dtype == IR_BF16) {
    b = a->in[0];
  } else {
    return NULL;
  }
  if (y->dtype != IR_F32 || !same_local_shape(m, y, g) || !same_local_shape(m, b, g) ||
      overlaps(m, y, b))
    return NULL;
  for (int k = 0; k < n->nin; k++)
    if (overlaps(m, y, n->in[k])) return NULL;
  *base = b;
  return y;
}

bool ir_adamw_joins(const IrNode *a, const IrNode *b) {
  if (a->op != IR_OP_ADAMW || b->op != IR_OP_ADAMW || a->nin < 7 || b->nin < 7) return false;
  for (int k = 4; k < 7; k++)
    if (a->in[k] != b->in[k]) return false;
  const IrAttrId ids[3] = {IR_ATTR_BETA1, IR_ATTR_BETA2, IR_ATTR_EPS};
  for (int k = 0; k < 3; k++)
    if (a->attrs.v[ids[k]].f != b->attrs.v[ids[k]].f) return false;
  return true;
}

int ir_adamw_run_end(const IrFunc *f, int i, const unsigned char *keep) {
  int last = i;
  while (last + 1 < f->nodes.len && (!keep || keep[last + 1]) &&
         ir_adamw_joins(f->nodes.items[i], f->nodes.items[last + 1]))
    last++;
  return last;
}

IrMerge ir_merged_into_prev(const IrModule *m, const IrFunc *f, int i, const IrMap *uses) {
  if (i < 1 || i >= f->nodes.len) return IR_MERGE_NONE;
  const IrValue *other;
  switch (((const IrNode *)f->nodes.items[i - 1])->op) {
    case IR_OP_LINEAR:
      return ir_linear_bias_next(m, f, i - 1, uses) || ir_f32_dest_next(m, f, i - 1, uses, &other)
                 ? IR_MERGE_EPILOGUE
                 : IR_MERGE_NONE;
    case IR_OP_LINEAR_GRAD_X:
    case IR_OP_LINEAR_GRAD_W:
      return ir_f32_dest_next(m, f, i - 1, uses, &other) ? IR_MERGE_EPILOGUE : IR_MERGE_NONE;
    case IR_OP_LAYER_NORM_GRAD:
      return ir_residual_next(m, f, i - 1, uses) ? IR_MERGE_EPILOGUE : IR_MERGE_NONE;
    case IR_OP_EMBEDDING_GRAD:
      return ir_grad_sum_next(m, f, i - 1, uses, &other) ? IR_MERGE_EPILOGUE : IR_MERGE_NONE;
    case IR_OP_ADAMW:
      /* joining is the same for every pair of a run (the same operands and
       * attributes), so the node before tells */
      return ir_adamw_joins(f->nodes.items[i - 1], f->nodes.items[i]) ? IR_MERGE_CALL
                                                                      : IR_MERGE_NONE;
    default: return IR_MERGE_NONE;
  }
}
