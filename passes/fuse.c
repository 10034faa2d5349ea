/* The `fuse` pass: chains of elementwise ops become one `fused` node whose
 * sub-program (ir_fused.h) codegen turns into a single loop, so that a
 * bias add, activation, layer scale and residual add read and write memory once.
 *
 * Walking each function backwards, an elementwise node roots a group and
 * absorbs the producers of its operands when the producer is elementwise
 * too, its result is an activation used exactly once (by the group) and is
 * not returned, and its result has the root's element count and placement
 * (one loop over one local shape). The element count is where broadcasting
 * stays simple: operands may broadcast into the loop
 * (a bias, a layer-scale vector, a scalar), but no value inside the loop is
 * smaller than the result, so nothing is computed twice. A group stops
 * growing before it could have more operands than a fused node takes
 * (the max_in of its ops.def row; VideoDiT's timestep gradient sums 192 slices). The fused node
 * takes the root's place and keeps its result value (and so its uses, role
 * and gradient link); absorbed nodes disappear. */
#include <stdlib.h>
#include <string.h>

#include "../ir/ir_fused.h"
#include "pass.h"

static bool fusible(const IrNode *n) {
  return (ir_ops[n->op].flags & OPF_ELEMWISE) && n->op != IR_OP_FUSED && n->nout == 1 &&
         ir_ops[n->op].max_in <= IR_FUSED_MAX_ARGS;
}

typedef struct Group {
  int root;
  int *members; /* node indices, ascending */
  int n;
} Group;

static int cmp_int(const void *a, const void *b) {
  return *(const int *)a - *(const int *)b;
}

/* The fused node replacing group g (members of f's old node list `old`). */
static IrNode *build_fused(IrModule *m, IrFunc *f, void **old, const Group *g, Arena *a,
                           PassCtx *cx) {
  IrMap tnum, inum; /* member result -> t index; external operand -> i index */
  ir_map_init(&tnum, a, false);
  ir_map_init(&inum, a, false);
  IrValue **ext = ARENA_ARRAY(a, IrValue *, g->n * IR_FUSED_MAX_ARGS + 1);
  int next = 0;
  IrFusedProg p = {g->n, ARENA_ARRAY(a, IrFusedInstr, g->n)};
  for (int k = 0; k < g->n; k++) {
    const IrNode *n = old[g->members[k]];
    IrFusedInstr *in = &p.ins[k];
    in->op = n->op;
    in->attrs = n->attrs;
    in->nargs = n->nin;
    for (int j = 0; j < n->nin; j++) {
      IrMapSlot *s = ir_map_get(&tnum, n->in[j]);
      if (s) {
        in->arg[j] = (int)s->i;
        continue;
      }
      s = ir_map_put(&inum, n->in[j]);
      if (!s->p) {
        s->p = n->in[j];
        s->i = next;
        ext[next++] = n->in[j];
      }
      in->arg[j] = -1 - (int)s->i;
    }
    ir_map_put(&tnum, n->out[0])->i = k;
  }
  const IrNode *root = old[g->root];
  IrAttrs attrs;
  memset(&attrs, 0, sizeof attrs);
  attrs.set = 1ull << IR_ATTR_PROG;
  attrs.v[IR_ATTR_PROG].s = ir_fused_format(&p, a);
  IrBuilder b = {.m = m, .f = f, .scope = root->scope, .group = root->group, .layer = root->layer};
  char err[512];
  IrNode *fn = ir_build(&b, IR_OP_FUSED, ext, next, &attrs, root->loc, err, sizeof err, NULL);
  if (!fn) {
    diag_error_plain(cx->d, "fuse: %s (program \"%s\")", err, attrs.v[IR_ATTR_PROG].s);
    return NULL;
  }
  IrValue *v = root->out[0];
  MM_ASSERT(fn->out[0]->dtype == v->dtype && ir_shape_eq(&fn->out[0]->shape, &v->shape));
  fn->out[0] = v; /* keep the value: its uses, role and gradient link stay */
  v->def = fn;
  return fn;
}

static bool fuse_func(IrModule *m, IrFunc *f, PassCtx *cx, Arena *a) {
  int nn = f->nodes.len;
  if (nn == 0) return true;
  IrMap uses, index; /* value -> use count; node -> index */
  ir_map_init(&uses, a, false);
  ir_map_init(&index, a, false);
  for (int i = 0; i < nn; i++) {
    IrNode *n = f->nodes.items[i];
    ir_map_put(&index, n)->i = i;
    for (int k = 0; k < n->nin; k++) ir_map_put(&uses, n->in[k])->i++;
  }
  for (int i = 0; i < f->results.len; i++)
    ir_map_put(&uses, f->results.items[i])->i += 2; /* pinned */

  int *group_of = ARENA_ARRAY(a, int, nn);
  for (int i = 0; i < nn; i++) group_of[i] = -1;
  Group *groups = ARENA_ARRAY(a, Group, nn);
  int ngroups = 0;
  int *work = ARENA_ARRAY(a, int, nn);
  for (int r = nn - 1; r >= 0; r--) {
    IrNode *root = f->nodes.items[r];
    if (group_of[r] >= 0 || !fusible(root)) continue;
    int64_t numel = ir_numel(&root->out[0]->shape);
    int nw = 0, nmem = 0, nargs = root->nin; /* nargs: a bound on the group's operands */
    work[nw++] = r;
    int *members = ARENA_ARRAY(a, int, r + 1); /* members are nodes 0 .. r */
    group_of[r] = ngroups;
    while (nw) {
      const IrNode *n = f->nodes.items[work[--nw]];
      members[nmem++] = (int)ir_map_get(&index, n)->i;
      for (int k = 0; k < n->nin; k++) {
        IrValue *x = n->in[k];
        IrMapSlot *s = x->def ? ir_map_get(&index, x->def) : NULL;
        if (!s || group_of[s->i] >= 0) continue;
        const IrNode *p = x->def;
        if (!fusible(p) || x->role != IR_ROLE_ACT || ir_map_get(&uses, x)->i != 1 ||
            ir_numel(&x->shape) != numel || memcmp(x->pl, root->out[0]->pl, sizeof x->pl) != 0 ||
            nargs - 1 + p->nin > ir_ops[IR_OP_FUSED].max_in) /* x's place taken by p's operands */
          continue;
        nargs += p->nin - 1;
        group_of[s->i] = ngroups;
        work[nw++] = (int)s->i;
      }
    }
    if (nmem < 2) {
      group_of[r] = -1;
      continue;
    }
    qsort(members, (size_t)nmem, sizeof *members, cmp_int);
    groups[ngroups++] = (Group){r, members, nmem};
  }
  if (ngroups == 0) return true;

  void **old = f->nodes.items;
  f->nodes = (PtrVec){0};
  for (int i = 0; i < nn; i++) {
    int g = group_of[i];
    if (g < 0) {
      ptrvec_push(&m->arena, &f->nodes, old[i]);
    } else if (groups[g].root == i) {
      if (!build_fused(m, f, old, &groups[g], a, cx)) return false;
    }
  }
  ir_func_renumber(f);
  return true;
}

bool pass_fuse(IrModule *m, PassCtx *cx) {
  if (m->no_fuse) return true;
  Arena a;
  arena_init(&a);
  bool ok = true;
  for (int i = 0; ok && i < m->funcs.len; i++) ok = fuse_func(m, m->funcs.items[i], cx, &a);
  arena_free(&a);
  return ok;
}
