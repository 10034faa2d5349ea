/* The `vocabpad` pass: a vocabulary that tp does not divide is padded so
 * that the embedding and the cross entropy stay vocabulary-parallel
 * (Megatron's --make-vocab-size-divisible-by, whose default is 128).
 *
 * Under tp > 1, every parameter of V rows (dim 0) that is an embedding
 * table, or the weight of a linear whose result (plus a bias [V], also
 * padded) is the logits of a cross_entropy, where tp does not divide V,
 * gets Vp rows: V rounded up to
 * a multiple of 128 tp (GPT-2's 50,257 under tp = 2: 50,432). A vocabulary
 * tp divides is left alone, so are serial plans. The parameter keeps
 * `rows = V` (printed `rows(V)`): the trainer initialises rows [0, V) with
 * exactly the serial values (the "init/<name>" stream is indexed by the
 * element of the whole tensor, which padding at the end of dim 0 does not
 * move) and the padding with zeros, and saves and loads only rows [0, V)
 * (--save-weights and checkpoints hold the unpadded tensors). The shapes
 * after them are inferred again, and each cross_entropy (and later its
 * gradient) whose logits grew gets `vocab = V`: the classes >= V are out of
 * the max, the log-sum-exp and the loss, their dlogits are zero. So the
 * padding rows get a zero gradient, their AdamW moments stay zero and the
 * decoupled weight decay keeps them at zero: they never train.
 *
 * Runs before autodiff, on every function of the module; the shard pass
 * then splits the padded tables and logits over tp. A shape after the
 * padded parameter that cannot take the new size (a reshape naming V) is an
 * error at that node. */
#include <string.h>

#include "pass.h"

#define VOCAB_MULTIPLE 128 /* times tp: Megatron's make-vocab-size-divisible-by */

static bool is_param(const IrValue *v) {
  return v && !v->def && v->role == IR_ROLE_PARAM;
}

/* The loss head of a cross_entropy: the linear (weight *w) whose result,
 * maybe plus a bias *b [V], is its logits; false when there is none. */
static bool loss_head(const IrNode *ce, IrValue **w, IrValue **b) {
  const IrValue *y = ce->in[0];
  *w = *b = NULL;
  const IrNode *n = y->def;
  if (n && n->op == IR_OP_ADD) { /* linear + bias */
    for (int k = 0; k < 2 && !*b; k++)
      if (is_param(n->in[k]) && n->in[k]->shape.rank == 1 && n->in[1 - k]->def) {
        *b = n->in[k];
        n = n->in[1 - k]->def;
      }
    if (!*b) return false;
  }
  if (!n || n->op != IR_OP_LINEAR || !is_param(n->in[1]) || n->in[1]->shape.rank != 2) return false;
  *w = n->in[1];
  if (*b && (*b)->shape.d[0] != (*w)->shape.d[0] && (*b)->rows != (*w)->shape.d[0]) *b = NULL;
  return true;
}

static void pad(IrValue *p, int64_t Vp, int *npadded) {
  if (p->rows || p->shape.rank < 1) return;
  p->rows = p->shape.d[0];
  p->shape.d[0] = Vp;
  (*npadded)++;
}

/* Infers the results' shapes of n again from its operands. */
static bool reinfer(IrNode *n, char *err, size_t errlen) {
  IrShapeCtx cx;
  memset(&cx, 0, sizeof cx);
  cx.node = n;
  cx.nin = n->nin;
  for (int i = 0; i < n->nin; i++) {
    cx.in_dtype[i] = n->in[i]->dtype;
    cx.in_shape[i] = &n->in[i]->shape;
  }
  cx.err = err;
  cx.errlen = errlen;
  cx.bad_operand = -1;
  err[0] = 0;
  if (!ir_ops[n->op].shape(&cx)) return false;
  for (int j = 0; j < n->nout; j++) n->out[j]->shape = cx.out_shape[j];
  return true;
}

bool pass_vocabpad(IrModule *m, PassCtx *cx) {
  Diag *d = cx->d ? cx->d : m->diag;
  int tp = m->plan.tp;
  if (tp <= 1) return true;
  int64_t mult = (int64_t)VOCAB_MULTIPLE * tp;
  int npadded = 0;
  for (int fi = 0; fi < m->funcs.len; fi++) {
    IrFunc *f = m->funcs.items[fi];
    for (int i = 0; i < f->nodes.len; i++) {
      IrNode *n = f->nodes.items[i];
      IrValue *w = n->nin > 1 ? n->in[1] : NULL, *b = NULL;
      bool table = n->op == IR_OP_EMBEDDING && is_param(w) && w->shape.rank == 2;
      bool head = n->op == IR_OP_CROSS_ENTROPY && loss_head(n, &w, &b);
      if (!table && !head) continue;
      int64_t V = w->rows ? w->rows : w->shape.d[0];
      if (V % tp == 0) continue;
      int64_t Vp = (V + mult - 1) / mult * mult;
      pad(w, Vp, &npadded);
      if (b) pad(b, Vp, &npadded);
    }
  }
  if (!npadded) return true;
  char err[400];
  for (int fi = 0; fi < m->funcs.len; fi++) {
    IrFunc *f = m->funcs.items[fi];
    for (int i = 0; i < f->nodes.len; i++) {
      IrNode *n = f->nodes.items[i];
      if (!reinfer(n, err, sizeof err)) {
        diag_error(d, n->loc,
                   "vocabulary padding (tp = %d): %s after a vocabulary was padded to a multiple "
                   "of %lld",
                   tp, err[0] ? err : "the shapes do not fit", (long long)mult);
        return false;
      }
    }
  }
  /* each cross_entropy of padded logits: the real classes */
  for (int fi = 0; fi < m->funcs.len; fi++) {
    IrFunc *f = m->funcs.items[fi];
    for (int i = 0; i < f->nodes.len; i++) {
      IrNode *n = f->nodes.items[i];
      IrValue *w, *b;
      if (n->op != IR_OP_CROSS_ENTROPY || !loss_head(n, &w, &b) || !w->rows) continue;
      n->attrs.set |= 1ull << IR_ATTR_VOCAB;
      n->attrs.v[IR_ATTR_VOCAB].i = w->rows;
    }
  }
  return true;
}
