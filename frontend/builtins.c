/* Builtin functions of forward bodies: each binds its arguments by a small
 * signature ("x, weight, bias?, eps?") and emits IR ops. Methods
 * (x.reshape(...)) are the same functions with the tensor as first argument.
 * A few builtins also work on compile-time numbers (min, max, abs, sqrt). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fe_internal.h"

#define MAX_ARGS 8

typedef struct Args {
  FeProgram *p;
  AstExpr *call;
  const char *name;
  Val *v[MAX_ARGS];
  SrcLoc loc[MAX_ARGS];
  Val **rest; /* variadic positional arguments ("*" in the signature) */
  SrcLoc *rest_loc;
  int nrest;
} Args;

typedef Val *(*BiFn)(Args *a);

typedef struct Builtin {
  const char *name;
  const char *sig; /* comma separated; "name?" optional; "*" variadic positional (last) */
  BiFn fn;
  int kind; /* 0 function and method, 1 function only, 2 method only */
} Builtin;

/* ---- argument helpers ---- */

static SrcLoc at(Args *a) {
  return a->call->loc;
}

/* Argument i is not of the kind wanted ("a tensor", "an int", ...): a
 * message, unless it is an error already. */
static bool kind_error(Args *a, int i, const char *what, const char *want) {
  if (a->v[i]->k != V_ERR)
    diag_error(a->p->d, a->loc[i], "%s: argument '%s' must be %s, not a %s", a->name, what, want,
               val_kind_name(a->v[i]->k));
  return false;
}

/* Argument i as a tensor (NULL when absent or not one); an int, a number or
 * a bool (dflt when absent; false after a message when of another kind). */
static IrValue *tensor_arg(Args *a, int i, const char *what) {
  if (a->v[i] && a->v[i]->k != V_TENSOR) kind_error(a, i, what, "a tensor");
  return a->v[i] && a->v[i]->k == V_TENSOR ? a->v[i]->t : NULL;
}
static bool int_arg(Args *a, int i, const char *what, int64_t dflt, int64_t *out) {
  if (a->v[i] && a->v[i]->k != V_INT) return kind_error(a, i, what, "an int");
  *out = a->v[i] ? a->v[i]->i : dflt;
  return true;
}
static bool num_arg(Args *a, int i, const char *what, double dflt, double *out) {
  if (a->v[i] && !val_is_num(a->v[i])) return kind_error(a, i, what, "a number");
  *out = a->v[i] ? val_num(a->v[i]) : dflt;
  return true;
}
static bool bool_arg(Args *a, int i, const char *what, bool dflt, bool *out) {
  if (a->v[i] && a->v[i]->k != V_BOOL) return kind_error(a, i, what, "a bool");
  *out = a->v[i] ? a->v[i]->b : dflt;
  return true;
}

/* An int or a list of n ints (stride = 2 or stride = [2, 2]). */
static bool ints_arg(Args *a, int i, const char *what, int n, int64_t dflt, int64_t *out) {
  Val *v = a->v[i];
  if (!v || v->k == V_INT) {
    for (int k = 0; k < n; k++) out[k] = v ? v->i : dflt;
    return true;
  }
  if (v->k == V_LIST && v->n == n) {
    for (int k = 0; k < n; k++) {
      if (v->items[k]->k != V_INT) goto bad;
      out[k] = v->items[k]->i;
    }
    return true;
  }
bad:
  if (v->k != V_ERR)
    diag_error(a->p->d, a->loc[i], "%s: '%s' must be an int or a list of %d ints", a->name, what,
               n);
  return false;
}

/* Variadic dims (x.reshape(B, -1, C)) or one list argument. */
static bool dims_rest(Args *a, int64_t *out, int *n) {
  Val **items = a->rest;
  int cnt = a->nrest;
  if (cnt == 1 && items[0]->k == V_LIST) {
    items = items[0]->items;
    cnt = a->rest[0]->n;
  }
  if (cnt > IR_MAX_RANK) {
    diag_error(a->p->d, at(a), "%s: at most %d dimensions", a->name, IR_MAX_RANK);
    return false;
  }
  for (int i = 0; i < cnt; i++) {
    if (items[i]->k == V_ERR) return false;
    if (items[i]->k != V_INT) {
      diag_error(a->p->d, a->nrest == cnt ? a->rest_loc[i] : at(a),
                 "%s: dimensions must be ints, not a %s", a->name, val_kind_name(items[i]->k));
      return false;
    }
    out[i] = items[i]->i;
  }
  *n = cnt;
  return true;
}

static bool norm_axis(Args *a, int64_t axis, int rank, SrcLoc loc, int64_t *out) {
  int64_t r = axis < 0 ? axis + rank : axis;
  if (r < 0 || r >= rank) {
    diag_error(a->p->d, loc, "%s: axis %lld is out of range for rank %d", a->name, (long long)axis,
               rank);
    return false;
  }
  *out = r;
  return true;
}

static Val *emit(Args *a, IrOp op, IrValue **in, int nin, IrAttrs *at_) {
  for (int i = 0; i < nin; i++)
    if (!in[i]) return val_err(a->p);
  return val_tensor(a->p, fe_emit(a->p, op, in, nin, at_, at(a)));
}

/* ---- builtins ---- */

static Val *bi_linear(Args *a) {
  IrValue *x = tensor_arg(a, 0, "x"), *w = tensor_arg(a, 1, "weight");
  if (!x || !w) return val_err(a->p);
  IrValue *in[2] = {x, w};
  Val *y = emit(a, IR_OP_LINEAR, in, 2, NULL);
  if (a->v[2] && y->k == V_TENSOR) {
    IrValue *b = tensor_arg(a, 2, "bias");
    IrValue *in2[2] = {y->t, b};
    return emit(a, IR_OP_ADD, in2, 2, NULL);
  }
  return y;
}

static Val *bi_matmul(Args *a) {
  IrValue *in[2] = {tensor_arg(a, 0, "a"), tensor_arg(a, 1, "b")};
  return emit(a, IR_OP_MATMUL, in, 2, NULL);
}

static Val *norm(Args *a, IrOp op, int nweights, int eps_slot, double eps_dflt) {
  IrValue *in[3];
  int n = 0;
  in[n++] = tensor_arg(a, 0, "x");
  for (int i = 1; i <= nweights; i++)
    if (a->v[i]) in[n++] = tensor_arg(a, i, i == 1 ? "weight" : "bias");
  IrAttrs at_ = {0};
  double eps;
  if (!num_arg(a, eps_slot, "eps", eps_dflt, &eps)) return val_err(a->p);
  ir_attrs_set_float(&at_, IR_ATTR_EPS, eps);
  if (op == IR_OP_LAYER_NORM && a->v[4] && in[0]) {
    /* axis = d: over dim d (the channels of [B, C, T, H, W]) in place;
     * the last dim, the default, leaves the attribute unset */
    int64_t axis;
    if (!int_arg(a, 4, "axis", -1, &axis) ||
        !norm_axis(a, axis, in[0]->shape.rank, a->loc[4], &axis))
      return val_err(a->p);
    if (axis != in[0]->shape.rank - 1) ir_attrs_set_int(&at_, IR_ATTR_AXIS, axis);
  }
  return emit(a, op, in, n, &at_);
}

static Val *bi_layer_norm(Args *a) {
  if (a->v[2] && !a->v[1]) {
    diag_error(a->p->d, a->loc[2], "layer_norm: a bias needs a weight");
    return val_err(a->p);
  }
  return norm(a, IR_OP_LAYER_NORM, 2, 3, 1e-5);
}
static Val *bi_rms_norm(Args *a) {
  return norm(a, IR_OP_RMS_NORM, 1, 2, 1e-6);
}

static const Builtin op_builtins[IR_OP_COUNT];
static int parse_sig(const char *sig, char names[MAX_ARGS][24], bool opt[MAX_ARGS], bool *variadic);

/* A builtin made from its op's row alone (ops.def FE(bi_op, "signature",
 * kind)): an argument named like an attribute (attrs.def) sets it, an int
 * or a number ("name?=V": optional, V when left off); the others are the
 * operands, in order ("name?": left off when not given). */
static Val *bi_op(Args *a) {
  IrOp op;
  MM_ASSERT(ir_op_parse(a->name, &op));
  const char *sig = op_builtins[op].sig;
  char names[MAX_ARGS][24];
  bool opt[MAX_ARGS], variadic;
  int n = parse_sig(sig, names, opt, &variadic);
  IrValue *in[MAX_ARGS];
  int nin = 0;
  IrAttrs at_ = {0};
  for (int i = 0; i < n; i++) {
    int k = 0;
    while (k < IR_ATTR_COUNT && strcmp(ir_attrs[k].name, names[i]) != 0) k++;
    if (k == IR_ATTR_COUNT) { /* an operand */
      if (!a->v[i]) continue;
      if (!(in[nin++] = tensor_arg(a, i, names[i]))) return val_err(a->p);
      continue;
    }
    char pat[32];
    snprintf(pat, sizeof pat, "%.24s?=", names[i]);
    const char *d = strstr(sig, pat);
    double dflt = d ? strtod(d + strlen(pat), NULL) : 0;
    if (ir_attrs[k].kind == IR_AK_INT) {
      int64_t v;
      if (!int_arg(a, i, names[i], (int64_t)dflt, &v)) return val_err(a->p);
      ir_attrs_set_int(&at_, (IrAttrId)k, v);
    } else {
      MM_ASSERT(ir_attrs[k].kind == IR_AK_FLOAT);
      double v;
      if (!num_arg(a, i, names[i], dflt, &v)) return val_err(a->p);
      ir_attrs_set_float(&at_, (IrAttrId)k, v);
    }
  }
  return emit(a, op, in, nin, &at_);
}

static Val *conv(Args *a, IrOp op, int nd) {
  IrValue *in[3];
  int n = 0;
  in[n++] = tensor_arg(a, 0, "x");
  in[n++] = tensor_arg(a, 1, "weight");
  if (a->v[2]) in[n++] = tensor_arg(a, 2, "bias");
  int64_t stride[3], pad[3];
  if (!ints_arg(a, 3, "stride", nd, 1, stride) || !ints_arg(a, 4, "padding", nd, 0, pad))
    return val_err(a->p);
  for (int i = 0; i < nd; i++) {
    if (stride[i] < 1 || pad[i] < 0) {
      diag_error(a->p->d, at(a), "%s: stride must be >= 1 and padding >= 0", a->name);
      return val_err(a->p);
    }
  }
  IrAttrs at_ = {0};
  ir_attrs_set_ints(&at_, IR_ATTR_STRIDE, stride, nd);
  ir_attrs_set_ints(&at_, IR_ATTR_PADDING, pad, nd);
  return emit(a, op, in, n, &at_);
}
static Val *bi_conv2d(Args *a) {
  return conv(a, IR_OP_CONV2D, 2);
}
static Val *bi_conv3d(Args *a) {
  return conv(a, IR_OP_CONV3D, 3);
}

static Val *bi_embedding(Args *a) {
  IrValue *in[2] = {tensor_arg(a, 0, "ids"), tensor_arg(a, 1, "table")};
  return emit(a, IR_OP_EMBEDDING, in, 2, NULL);
}

static Val *bi_rope(Args *a) {
  IrValue *x = tensor_arg(a, 0, "x");
  double theta;
  int64_t off;
  if (!num_arg(a, 1, "theta", 10000.0, &theta) || !int_arg(a, 2, "offset", 0, &off))
    return val_err(a->p);
  if (!(theta > 1.0)) {
    diag_error(a->p->d, a->loc[1], "rope: theta must be greater than 1, not %g", theta);
    return val_err(a->p);
  }
  IrAttrs at_ = {0};
  ir_attrs_set_float(&at_, IR_ATTR_THETA, theta);
  if (off) ir_attrs_set_int(&at_, IR_ATTR_OFFSET, off);
  if (fe_mode_cached(a->p) && x && x->shape.rank == 4) { /* positions from the `pos` input */
    IrValue *in[2] = {x, fe_cache_pos(a->p, x->shape.d[0], at(a))};
    return emit(a, IR_OP_ROPE, in, 2, &at_);
  }
  return emit(a, IR_OP_ROPE, &x, 1, &at_);
}

IrValue *fe_cache_pos(FeProgram *p, int64_t batch, SrcLoc loc) {
  if (!p->pos) {
    IrShape s = {.rank = 1, .d = {batch}};
    p->pos = ir_add_input(p->ir, p->b.f, "pos", IR_I32, &s, loc);
  }
  return p->pos;
}

/* A causal attention in a KV-cache mode: the new keys and values go into
 * the caches (inputs <scope>.k_cache, .v_cache), the queries attend to them. */
static Val *cached_attention(Args *a, IrValue **qkv, double scale) {
  FeProgram *p = a->p;
  const IrShape *ks = &qkv[1]->shape;
  IrShape cs = {.rank = 4, .d = {ks->d[0], p->cache_len, ks->d[2], ks->d[3]}};
  IrValue *pos = fe_cache_pos(p, ks->d[0], at(a)), *cache[2];
  const char *scope = p->b.scope ? p->b.scope : "attention";
  for (int i = 0; i < 2; i++) {
    size_t n = strlen(scope) + 10;
    char *name = arena_alloc(&p->ast, n);
    snprintf(name, n, "%s.%s_cache", scope, i ? "v" : "k");
    for (int j = 0; j < p->b.f->inputs.len; j++) {
      IrValue *v = p->b.f->inputs.items[j];
      if (strcmp(v->name, name) == 0) {
        diag_error(p->d, at(a),
                   "attention: a second cached attention in scope '%s'; each needs its own module",
                   scope);
        return val_err(p);
      }
    }
    cache[i] = ir_add_input(p->ir, p->b.f, name, qkv[1]->dtype, &cs, at(a));
    IrValue *in[3] = {cache[i], qkv[1 + i], pos};
    if (!fe_emit(p, IR_OP_KV_WRITE, in, 3, NULL, at(a))) return val_err(p);
  }
  IrAttrs at_ = {0};
  ir_attrs_set_float(&at_, IR_ATTR_SCALE, scale);
  IrValue *in[4] = {qkv[0], cache[0], cache[1], pos};
  return emit(a, IR_OP_ATTENTION_CACHED, in, 4, &at_);
}

/* place(x, src, ids, token, flat = false): src's rows where ids == token
 * (flat: src one pool for all rows) */
static Val *bi_place(Args *a) {
  IrValue *in[3] = {tensor_arg(a, 0, "x"), tensor_arg(a, 1, "src"), tensor_arg(a, 2, "ids")};
  int64_t tok;
  bool flat;
  if (!in[0] || !in[1] || !in[2] || !int_arg(a, 3, "token", -1, &tok) ||
      !bool_arg(a, 4, "flat", false, &flat))
    return val_err(a->p);
  if (!a->v[3] || tok < 0) {
    diag_error(a->p->d, at(a), "place: needs token = the id (>= 0) of the image-context token");
    return val_err(a->p);
  }
  if (a->p->mode == FE_DECODE)
    return a->v[0]; /* a generated token is never an image-context token */
  IrAttrs at_ = {0};
  ir_attrs_set_int(&at_, IR_ATTR_TOKEN, tok);
  if (flat) ir_attrs_set_bool(&at_, IR_ATTR_FLAT, true);
  return emit(a, IR_OP_PLACE, in, 3, &at_);
}

static Val *bi_attention(Args *a) {
  IrValue *in[4] = {tensor_arg(a, 0, "q"), tensor_arg(a, 1, "k"), tensor_arg(a, 2, "v"),
                    tensor_arg(a, 5, "mask")};
  bool causal;
  if (!in[0] || !bool_arg(a, 3, "causal", false, &causal)) return val_err(a->p);
  if (a->v[5] && !in[3]) return val_err(a->p);
  double scale;
  double dflt = in[0]->shape.rank == 4 ? 1.0 / sqrt((double)in[0]->shape.d[3]) : 1.0;
  if (!num_arg(a, 4, "scale", dflt, &scale)) return val_err(a->p);
  IrAttrs at_ = {0};
  ir_attrs_set_bool(&at_, IR_ATTR_CAUSAL, causal);
  ir_attrs_set_float(&at_, IR_ATTR_SCALE, scale);
  if (fe_mode_cached(a->p) && causal && in[1] && in[2] && in[1]->shape.rank == 4) {
    if (in[3]) {
      diag_error(a->p->d, at(a), "attention: a key mask is not supported in incremental decoding");
      return val_err(a->p);
    }
    return cached_attention(a, in, scale);
  }
  Val *r = emit(a, IR_OP_ATTENTION, in, in[3] ? 4 : 3, &at_);
  if (r->k == V_TENSOR && in[1]) {
    AttnSite *s = ARENA_NEW(&a->p->ast, AttnSite);
    s->heads = in[0]->shape.d[2];
    s->kv_heads = in[1]->shape.d[2];
    s->seq = in[0]->shape.d[1];
    s->kv_seq = in[1]->shape.d[1];
    s->causal = causal;
    s->loc = at(a);
    s->path = a->p->b.scope ? a->p->b.scope : "";
    ptrvec_push(&a->p->ast, &a->p->attn, s);
  }
  return r;
}

static Val *softmax_like(Args *a, IrOp op) {
  IrValue *x = tensor_arg(a, 0, "x");
  int64_t axis;
  if (!x || !int_arg(a, 1, "axis", -1, &axis) || !norm_axis(a, axis, x->shape.rank, at(a), &axis))
    return val_err(a->p);
  IrAttrs at_ = {0};
  ir_attrs_set_int(&at_, IR_ATTR_AXIS, axis);
  return emit(a, op, &x, 1, &at_);
}
static Val *bi_softmax(Args *a) {
  return softmax_like(a, IR_OP_SOFTMAX);
}
static Val *bi_log_softmax(Args *a) {
  return softmax_like(a, IR_OP_LOG_SOFTMAX);
}

/* an elementwise unary op by its mnemonic (with `flag` set), or NULL */
static Val *unary_named(Args *a, const char *name, IrValue *x, unsigned flag) {
  IrOp op;
  if (!ir_op_parse(name, &op) || ir_ops[op].max_in != 1 || !(ir_ops[op].flags & OPF_ELEMWISE) ||
      (ir_ops[op].flags & flag) != flag)
    return NULL;
  return emit(a, op, &x, 1, NULL);
}

static Val *bi_unary(Args *a) {
  Val *v = a->v[0];
  if (v && val_is_num(v)) {
    double x = val_num(v);
    if (strcmp(a->name, "sqrt") == 0 && x >= 0) return val_float(a->p, sqrt(x));
    if (strcmp(a->name, "exp") == 0) return val_float(a->p, exp(x));
    if (strcmp(a->name, "log") == 0 && x > 0) return val_float(a->p, log(x));
    diag_error(a->p->d, at(a), "%s of %g is not defined", a->name, x);
    return val_err(a->p);
  }
  IrValue *x = tensor_arg(a, 0, "x");
  if (!x) return val_err(a->p);
  return unary_named(a, a->name, x, 0);
}

static Val *bi_activation(Args *a) {
  IrValue *x = tensor_arg(a, 0, "x");
  Val *n = a->v[1];
  if (!x || n->k == V_ERR) return val_err(a->p);
  if (n->k != V_STR && n->k != V_SYM) {
    diag_error(a->p->d, a->loc[1], "activation: the name must be a string naming an activation");
    return val_err(a->p);
  }
  Val *y = unary_named(a, n->s, x, OPF_ACTIVATION);
  if (y) return y;
  char names[256] = "";
  int k = 0, count = 0;
  for (int i = 0; i < IR_OP_COUNT; i++) count += (ir_ops[i].flags & OPF_ACTIVATION) != 0;
  for (int i = 0, seen = 0; i < IR_OP_COUNT; i++)
    if (ir_ops[i].flags & OPF_ACTIVATION)
      k += snprintf(names + k, sizeof names - (size_t)k, "%s%s",
                    seen++ ? seen == count ? " or " : ", " : "", ir_ops[i].name);
  diag_error(a->p->d, a->loc[1], "unknown activation \"%s\" (expected %s)", n->s, names);
  return val_err(a->p);
}

static Val *reduce(Args *a, IrOp op) {
  IrValue *x = tensor_arg(a, 0, "x");
  if (!x) return val_err(a->p);
  int64_t axes[IR_MAX_RANK];
  int n = 0;
  Val *ax = a->v[1];
  if (!ax) {
    for (int i = 0; i < x->shape.rank; i++) axes[n++] = i;
  } else if (ax->k == V_INT) {
    axes[n++] = ax->i;
  } else if (ax->k == V_LIST && ax->n <= IR_MAX_RANK) {
    for (int i = 0; i < ax->n; i++) {
      if (ax->items[i]->k != V_INT) goto bad;
      axes[n++] = ax->items[i]->i;
    }
  } else {
  bad:
    if (ax->k != V_ERR)
      diag_error(a->p->d, a->loc[1], "%s: axis must be an int or a list of ints", a->name);
    return val_err(a->p);
  }
  for (int i = 0; i < n; i++)
    if (!norm_axis(a, axes[i], x->shape.rank, a->loc[1], &axes[i])) return val_err(a->p);
  bool keep;
  if (!bool_arg(a, 2, "keepdim", false, &keep)) return val_err(a->p);
  IrAttrs at_ = {0};
  ir_attrs_set_ints(&at_, IR_ATTR_AXES, axes, n);
  if (keep) ir_attrs_set_bool(&at_, IR_ATTR_KEEPDIM, true);
  return emit(a, op, &x, 1, &at_);
}
static Val *bi_sum(Args *a) {
  return reduce(a, IR_OP_SUM);
}
static Val *bi_mean(Args *a) {
  return reduce(a, IR_OP_MEAN);
}

static Val *bi_cross_entropy(Args *a) {
  IrValue *in[2] = {tensor_arg(a, 0, "logits"), tensor_arg(a, 1, "labels")};
  int64_t ignore;
  if (!int_arg(a, 2, "ignore", -100, &ignore)) return val_err(a->p);
  IrAttrs at_ = {0};
  ir_attrs_set_int(&at_, IR_ATTR_IGNORE, ignore);
  return emit(a, IR_OP_CROSS_ENTROPY, in, 2, &at_);
}

static Val *bi_mse(Args *a) {
  IrValue *in[2] = {tensor_arg(a, 0, "a"), tensor_arg(a, 1, "b")};
  return emit(a, IR_OP_MSE, in, 2, NULL);
}

static Val *bi_concat(Args *a) {
  Val *l = a->v[0];
  if (l->k == V_ERR) return l;
  if (l->k != V_LIST || l->n < 1 || l->n > 64) {
    diag_error(a->p->d, a->loc[0],
               "concat: the first argument must be a list of 1 to 64 tensors, e.g. [a, b]");
    return val_err(a->p);
  }
  IrValue *in[64];
  for (int i = 0; i < l->n; i++) {
    if (l->items[i]->k == V_ERR) return val_err(a->p);
    if (l->items[i]->k != V_TENSOR) {
      diag_error(a->p->d, a->loc[0], "concat: item %d is a %s, not a tensor", i,
                 val_kind_name(l->items[i]->k));
      return val_err(a->p);
    }
    in[i] = l->items[i]->t;
  }
  int64_t axis;
  if (!int_arg(a, 1, "axis", 0, &axis) ||
      !norm_axis(a, axis, in[0]->shape.rank, a->v[1] ? a->loc[1] : at(a), &axis))
    return val_err(a->p);
  if (l->n == 1) return l->items[0];
  IrAttrs at_ = {0};
  ir_attrs_set_int(&at_, IR_ATTR_AXIS, axis);
  return emit(a, IR_OP_CONCAT, in, l->n, &at_);
}

static Val *bi_dropout(Args *a) {
  IrValue *x = tensor_arg(a, 0, "x");
  double pr;
  if (!x || !num_arg(a, 1, "p", 0.0, &pr)) return val_err(a->p);
  if (pr < 0 || pr >= 1) {
    diag_error(a->p->d, a->loc[1], "dropout: p must be in [0, 1), not %g", pr);
    return val_err(a->p);
  }
  if (pr == 0) return a->v[0];
  IrAttrs at_ = {0};
  ir_attrs_set_float(&at_, IR_ATTR_P, pr);
  return emit(a, IR_OP_DROPOUT, &x, 1, &at_);
}

static Val *fill(Args *a, double value) {
  int64_t d[IR_MAX_RANK];
  int n;
  if (!dims_rest(a, d, &n)) return val_err(a->p);
  double v = value;
  if (a->v[0] && !num_arg(a, 0, "value", value, &v)) return val_err(a->p);
  IrAttrs at_ = {0};
  ir_attrs_set_ints(&at_, IR_ATTR_SHAPE, d, n);
  ir_attrs_set_float(&at_, IR_ATTR_VALUE, v);
  ir_attrs_set_dtype(&at_, IR_ATTR_DTYPE, IR_F32);
  return emit(a, IR_OP_FULL, NULL, 0, &at_);
}
/* randn(dims...): one noise site per call, numbered in the order of the
 * function's nodes (the stream "randn/<site>", ops.def) */
static Val *bi_randn(Args *a) {
  int64_t d[IR_MAX_RANK];
  int n;
  if (!dims_rest(a, d, &n)) return val_err(a->p);
  int64_t site = 0;
  const IrFunc *f = a->p->b.f;
  for (int i = 0; f && i < f->nodes.len; i++)
    site += ((IrNode *)f->nodes.items[i])->op == IR_OP_RANDN;
  IrAttrs at_ = {0};
  ir_attrs_set_ints(&at_, IR_ATTR_SHAPE, d, n);
  ir_attrs_set_dtype(&at_, IR_ATTR_DTYPE, IR_F32);
  ir_attrs_set_int(&at_, IR_ATTR_SEED, site);
  return emit(a, IR_OP_RANDN, NULL, 0, &at_);
}
static Val *bi_zeros(Args *a) {
  return fill(a, 0.0);
}
static Val *bi_ones(Args *a) {
  return fill(a, 1.0);
}
static Val *bi_full(Args *a) {
  if (!a->v[0]) {
    diag_error(a->p->d, at(a), "full: needs value = ...");
    return val_err(a->p);
  }
  return fill(a, 0.0);
}

/* ---- layout methods ---- */

static Val *reshape_to(Args *a, IrValue *x, const int64_t *d, int n) {
  IrAttrs at_ = {0};
  ir_attrs_set_ints(&at_, IR_ATTR_SHAPE, d, n);
  return emit(a, IR_OP_RESHAPE, &x, 1, &at_);
}

static Val *permute_to(Args *a, IrValue *x, const int64_t *perm, int n) {
  IrAttrs at_ = {0};
  ir_attrs_set_ints(&at_, IR_ATTR_PERM, perm, n);
  return emit(a, IR_OP_TRANSPOSE, &x, 1, &at_);
}

static Val *bi_reshape(Args *a) {
  IrValue *x = tensor_arg(a, 0, "x");
  int64_t d[IR_MAX_RANK];
  int n;
  if (!x || !dims_rest(a, d, &n)) return val_err(a->p);
  return reshape_to(a, x, d, n);
}

static Val *bi_transpose(Args *a) {
  IrValue *x = tensor_arg(a, 0, "x");
  int64_t i, j;
  if (!x || !int_arg(a, 1, "dim0", 0, &i) || !int_arg(a, 2, "dim1", 0, &j)) return val_err(a->p);
  if (!norm_axis(a, i, x->shape.rank, a->loc[1], &i) ||
      !norm_axis(a, j, x->shape.rank, a->loc[2], &j))
    return val_err(a->p);
  int64_t perm[IR_MAX_RANK];
  for (int k = 0; k < x->shape.rank; k++) perm[k] = k;
  perm[i] = j;
  perm[j] = i;
  return permute_to(a, x, perm, x->shape.rank);
}

static Val *bi_permute(Args *a) {
  IrValue *x = tensor_arg(a, 0, "x");
  int64_t d[IR_MAX_RANK];
  int n;
  if (!x || !dims_rest(a, d, &n)) return val_err(a->p);
  for (int k = 0; k < n; k++)
    if (!norm_axis(a, d[k], x->shape.rank, at(a), &d[k])) return val_err(a->p);
  return permute_to(a, x, d, n);
}

static Val *bi_flatten(Args *a) {
  IrValue *x = tensor_arg(a, 0, "x");
  int64_t s, e;
  if (!x || !int_arg(a, 1, "start", 0, &s) || !int_arg(a, 2, "end", -1, &e)) return val_err(a->p);
  int r = x->shape.rank;
  if (r == 0) return a->v[0];
  if (!norm_axis(a, s, r, at(a), &s) || !norm_axis(a, e, r, at(a), &e)) return val_err(a->p);
  if (s > e) {
    diag_error(a->p->d, at(a), "flatten: start %lld is after end %lld", (long long)s, (long long)e);
    return val_err(a->p);
  }
  int64_t d[IR_MAX_RANK];
  int n = 0;
  for (int k = 0; k < s; k++) d[n++] = x->shape.d[k];
  int64_t prod = 1;
  for (int64_t k = s; k <= e; k++) prod *= x->shape.d[k];
  d[n++] = prod;
  for (int k = (int)e + 1; k < r; k++) d[n++] = x->shape.d[k];
  return reshape_to(a, x, d, n);
}

static Val *bi_expand(Args *a) {
  IrValue *x = tensor_arg(a, 0, "x");
  int64_t d[IR_MAX_RANK];
  int n;
  if (!x || !dims_rest(a, d, &n)) return val_err(a->p);
  int off = n - x->shape.rank;
  for (int k = 0; k < n; k++)
    if (d[k] == -1 && k >= off) d[k] = x->shape.d[k - off];
  IrAttrs at_ = {0};
  ir_attrs_set_ints(&at_, IR_ATTR_SHAPE, d, n);
  return emit(a, IR_OP_EXPAND, &x, 1, &at_);
}

static Val *bi_pixel_unshuffle(Args *a) {
  IrValue *x = tensor_arg(a, 0, "x");
  int64_t f;
  if (!x || !int_arg(a, 1, "factor", 2, &f)) return val_err(a->p);
  if (x->shape.rank != 4) {
    diag_error(a->p->d, at(a), "pixel_unshuffle needs [B, H, W, C], got %s",
               fe_shape_str(a->p, &x->shape));
    return val_err(a->p);
  }
  int64_t B = x->shape.d[0], H = x->shape.d[1], W = x->shape.d[2], C = x->shape.d[3];
  if (f < 1 || H % f || W % f) {
    diag_error(a->p->d, at(a), "pixel_unshuffle: factor %lld does not divide the grid %lld x %lld",
               (long long)f, (long long)H, (long long)W);
    return val_err(a->p);
  }
  int64_t d6[6] = {B, H / f, f, W / f, f, C};
  Val *r = reshape_to(a, x, d6, 6);
  if (r->k != V_TENSOR) return r;
  int64_t perm[6] = {0, 1, 3, 2, 4, 5};
  r = permute_to(a, r->t, perm, 6);
  if (r->k != V_TENSOR) return r;
  int64_t d4[4] = {B, H / f, W / f, f * f * C};
  return reshape_to(a, r->t, d4, 4);
}

static Val *cast_to(Args *a, IrValue *x, IrDType dt) {
  if (x->dtype == dt) return a->v[0];
  IrAttrs at_ = {0};
  ir_attrs_set_dtype(&at_, IR_ATTR_DTYPE, dt);
  return emit(a, IR_OP_CAST, &x, 1, &at_);
}
static Val *bi_float(Args *a) {
  Val *v = a->v[0];
  if (v && val_is_num(v)) return val_float(a->p, val_num(v));
  IrValue *x = tensor_arg(a, 0, "x");
  return x ? cast_to(a, x, IR_F32) : val_err(a->p);
}
static Val *bi_to(Args *a) {
  IrValue *x = tensor_arg(a, 0, "x");
  Val *d = a->v[1];
  if (!x || d->k == V_ERR) return val_err(a->p);
  IrDType dt;
  if ((d->k != V_STR && d->k != V_SYM) || !ir_dtype_parse(d->s, &dt)) {
    diag_error(a->p->d, a->loc[1], "to: expected a dtype name such as \"bf16\"");
    return val_err(a->p);
  }
  return cast_to(a, x, dt);
}

/* ---- compile-time numbers ---- */

static Val *bi_minmax(Args *a) {
  bool is_min = a->name[1] == 'i';
  Val *x = a->v[0], *y = a->v[1];
  if (x->k == V_ERR || y->k == V_ERR) return val_err(a->p);
  if (!val_is_num(x) || !val_is_num(y)) {
    diag_error(a->p->d, at(a), "%s works on numbers", a->name);
    return val_err(a->p);
  }
  if (x->k == V_INT && y->k == V_INT)
    return val_int(a->p, is_min ? (x->i < y->i ? x->i : y->i) : (x->i > y->i ? x->i : y->i));
  double u = val_num(x), w = val_num(y);
  return val_float(a->p, is_min ? fmin(u, w) : fmax(u, w));
}
static Val *bi_abs(Args *a) {
  Val *x = a->v[0];
  if (x->k == V_TENSOR) return emit(a, IR_OP_ABS, &x->t, 1, NULL); /* |x| elementwise */
  if (x->k == V_INT && x->i != INT64_MIN) return val_int(a->p, x->i < 0 ? -x->i : x->i);
  if (x->k == V_FLOAT) return val_float(a->p, fabs(x->f));
  if (x->k != V_ERR) diag_error(a->p->d, at(a), "abs works on numbers");
  return val_err(a->p);
}
static Val *bi_int(Args *a) {
  Val *x = a->v[0];
  if (x->k == V_INT) return x;
  if (x->k == V_FLOAT && fabs(x->f) < 9e18) return val_int(a->p, (int64_t)x->f);
  if (x->k != V_ERR) diag_error(a->p->d, at(a), "int() needs a number");
  return val_err(a->p);
}
static Val *bi_len(Args *a) {
  Val *x = a->v[0];
  if (x->k == V_LIST) return val_int(a->p, x->n);
  if (x->k == V_INST && x->inst->is_stack) return val_int(a->p, x->inst->nlayers);
  if (x->k != V_ERR) diag_error(a->p->d, at(a), "len() needs a list or a stack");
  return val_err(a->p);
}

/* require(cond, message): a compile-time condition of a module on its sizes
 * (e.g. the frames a video model takes). False: an error at the call in the
 * root file that led here (the user's code), with a note at the require.
 * Not checked while elaborating @encode_next, whose input continues a clip
 * (the executable checks the chunk arithmetic). */
static Val *bi_require(Args *a) {
  bool ok;
  if (!bool_arg(a, 0, "cond", true, &ok)) return val_err(a->p);
  if (a->v[1]->k != V_STR) {
    kind_error(a, 1, "message", "a string");
    return val_err(a->p);
  }
  if (ok || a->p->mode == FE_ENCODE_NEXT) return val_bool(a->p, true);
  SrcLoc where = a->p->fwd_depth > 1 ? a->p->user_call : at(a);
  diag_error(a->p->d, where, "%s", a->v[1]->s);
  if (a->p->fwd_depth > 1) diag_note(a->p->d, at(a), "required here");
  a->p->unmet = true;
  return val_err(a->p);
}

/* x[:, :, lo:hi] along axis 2 (time) */
static IrValue *time_slice(Args *a, IrValue *x, int64_t lo, int64_t hi) {
  IrAttrs s = {0};
  ir_attrs_set_int(&s, IR_ATTR_AXIS, 2);
  ir_attrs_set_int(&s, IR_ATTR_START, lo);
  ir_attrs_set_int(&s, IR_ATTR_STOP, hi);
  return fe_emit1(a->p, IR_OP_SLICE, x, &s, at(a));
}

/* The name of a new cache input of @encode_next: <scope>.cache, then
 * <scope>.cache1, ... */
static const char *cache_name(FeProgram *p) {
  const char *scope = p->b.scope ? p->b.scope : "causal_pad";
  for (int k = 0;; k++) {
    const char *name = k ? arena_printf(&p->ast, "%s.cache%d", scope, k)
                         : arena_printf(&p->ast, "%s.cache", scope);
    bool used = false;
    for (int j = 0; j < p->b.f->inputs.len && !used; j++)
      used = strcmp(((IrValue *)p->b.f->inputs.items[j])->name, name) == 0;
    if (!used) return name;
  }
}

/* causal_pad(x, frames, keep): x [B, C, T, ...] with `frames` copies of
 * its first frame in front along the time axis (2), so a convolution over
 * time sees no later frame. In the chunked encoders (@encode, @encode_first,
 * @encode_next) the last `keep` frames of the padded tensor are a cache
 * result of the function; @encode_next puts the previous chunk's cache (an
 * input of that name, [B, C, keep, ...]) in front instead of the copies. */
static Val *bi_causal_pad(Args *a) {
  FeProgram *p = a->p;
  IrValue *x = tensor_arg(a, 0, "x");
  int64_t frames, keep;
  if (!x || !int_arg(a, 1, "frames", 0, &frames) || !int_arg(a, 2, "keep", 0, &keep))
    return val_err(p);
  if (x->shape.rank < 3 || frames < 0 || keep < 0 || keep > frames + x->shape.d[2]) {
    diag_error(p->d, at(a),
               "causal_pad: needs x [B, C, T, ...] and 0 <= frames, 0 <= keep <= frames + T; got "
               "%s, frames = %lld, keep = %lld",
               fe_shape_str(p, &x->shape), (long long)frames, (long long)keep);
    return val_err(p);
  }
  IrValue *front = NULL;
  if (p->mode == FE_ENCODE_NEXT) {
    if (keep) {
      const char *name = cache_name(p);
      IrShape cs = x->shape;
      cs.d[2] = keep;
      front = ir_add_input(p->ir, p->b.f, name, x->dtype, &cs, at(a));
    }
  } else if (frames > 0) { /* frame 0, expanded to `frames` copies when more than one */
    front = time_slice(a, x, 0, 1);
    if (front && frames > 1) {
      IrAttrs e = {0};
      IrShape es = x->shape;
      es.d[2] = frames;
      ir_attrs_set_ints(&e, IR_ATTR_SHAPE, es.d, es.rank);
      front = fe_emit1(p, IR_OP_EXPAND, front, &e, at(a));
    }
    if (!front) return val_err(p);
  }
  IrValue *out = x;
  if (front) {
    IrValue *in[2] = {front, x};
    IrAttrs c = {0};
    ir_attrs_set_int(&c, IR_ATTR_AXIS, 2);
    out = fe_emit(p, IR_OP_CONCAT, in, 2, &c, at(a));
    if (!out) return val_err(p);
  }
  if (keep && fe_mode_chunked(p)) { /* the next chunk's cache, in input order */
    IrValue *cache = time_slice(a, out, out->shape.d[2] - keep, out->shape.d[2]);
    if (!cache) return val_err(p);
    ptrvec_push(&p->ast, &p->caches, cache);
  }
  return val_tensor(p, out);
}

static const Builtin builtins[] = {
    {"activation", "x, name", bi_activation, 0},
    {"zeros", "*", bi_zeros, 1},
    {"ones", "*", bi_ones, 1},
    {"view", "x, *", bi_reshape, 2},
    {"permute", "x, *", bi_permute, 2},
    {"flatten", "x, start?, end?", bi_flatten, 2},
    {"pixel_unshuffle", "x, factor", bi_pixel_unshuffle, 2},
    {"float", "x", bi_float, 0},
    {"to", "x, dtype", bi_to, 2},
    {"min", "a, b", bi_minmax, 1},
    {"max", "a, b", bi_minmax, 1},
    {"abs", "x", bi_abs, 1},
    {"int", "x", bi_int, 1},
    {"len", "x", bi_len, 1},
    {"require", "cond, message", bi_require, 1},
    {"causal_pad", "x, frames, keep", bi_causal_pad, 1},
};

/* the builtins that are ops, named by their mnemonic: the FE(handler,
 * "signature", kind) column of ops.def (NOFE: no builtin) */
#define FE(fn, sig, kind) sig, fn, kind
#define NOFE              NULL, NULL, 0
static const Builtin op_builtins[IR_OP_COUNT] = {
#define OP(N, S, MIN, MAX, NOUT, REQ, OPT, FLAGS, FLOPS, SHP, G, SHARD, E, L, F)                   \
  [IR_OP_##N] = {S, F},
#include "../ir/ops.def"
#undef OP
};
#undef FE
#undef NOFE

static const Builtin *lookup(const char *name) {
  for (size_t i = 0; i < sizeof builtins / sizeof builtins[0]; i++)
    if (strcmp(builtins[i].name, name) == 0) return &builtins[i];
  for (int i = 0; i < IR_OP_COUNT; i++)
    if (op_builtins[i].fn && strcmp(op_builtins[i].name, name) == 0) return &op_builtins[i];
  return NULL;
}

bool fe_is_builtin(const char *name) {
  const Builtin *b = lookup(name);
  return b && b->kind != 2;
}

/* Splits the signature into names; returns the count, *variadic set when the
 * last entry is "*". */
static int parse_sig(const char *sig, char names[MAX_ARGS][24], bool opt[MAX_ARGS],
                     bool *variadic) {
  int n = 0;
  *variadic = false;
  const char *s = sig;
  while (*s && n < MAX_ARGS) {
    while (*s == ' ' || *s == ',') s++;
    if (!*s) break;
    if (*s == '*') {
      *variadic = true;
      s++;
      continue;
    }
    int k = 0;
    while (*s && *s != ',' && *s != '?' && k < 23) names[n][k++] = *s++;
    names[n][k] = 0;
    opt[n] = *s == '?';
    while (*s && *s != ',') s++; /* "?" and a default "=V" */
    n++;
  }
  return n;
}

Val *fe_call_builtin(FeProgram *p, Env *e, AstExpr *call, const char *name, Val *self) {
  const Builtin *b = lookup(name);
  if (!b || (self && b->kind == 1) || (!self && b->kind == 2)) {
    if (self)
      diag_error(p->d, call->lhs->loc, "a tensor has no method '%s'", name);
    else if (b)
      diag_error(p->d, call->lhs->loc, "'%s' is a method: write x.%s(...)", name, name);
    else
      diag_error(p->d, call->lhs->loc, "unknown function '%s'", name);
    return val_err(p);
  }
  char names[MAX_ARGS][24];
  bool opt[MAX_ARGS];
  bool variadic;
  int n = parse_sig(b->sig, names, opt, &variadic);
  Args a = {.p = p, .call = call, .name = name};
  a.rest = ARENA_ARRAY(&p->ast, Val *, call->args.len + 1);
  a.rest_loc = ARENA_ARRAY(&p->ast, SrcLoc, call->args.len + 1);
  int pos = 0;
  bool ok = true;
  if (self) {
    a.v[0] = self;
    a.loc[0] = call->lhs->loc;
    pos = 1;
  }
  /* the "full(value?, *)" form: value is keyword-only */
  bool kw_only_first = !self && variadic && n == 1 && opt[0];
  bool seen_kw = false;
  for (int i = 0; i < call->args.len; i++) {
    AstArg *arg = call->args.items[i];
    Val *v = fe_eval(p, e, arg->value);
    if (v->k == V_ERR) ok = false;
    if (arg->name) {
      seen_kw = true;
      int slot = -1;
      for (int k = 0; k < n; k++)
        if (strcmp(names[k], arg->name) == 0) slot = k;
      if (slot < 0) {
        diag_error(p->d, arg->loc, "%s has no argument named '%s'", name, arg->name);
        ok = false;
        continue;
      }
      if (a.v[slot]) {
        diag_error(p->d, arg->loc, "%s: argument '%s' is given twice", name, arg->name);
        ok = false;
        continue;
      }
      a.v[slot] = v;
      a.loc[slot] = arg->value->loc;
      continue;
    }
    if (seen_kw) {
      diag_error(p->d, arg->value->loc, "%s: a positional argument after a keyword argument", name);
      ok = false;
      continue;
    }
    if (pos < n && !kw_only_first) {
      a.v[pos] = v;
      a.loc[pos] = arg->value->loc;
      pos++;
    } else if (variadic) {
      a.rest_loc[a.nrest] = arg->value->loc;
      a.rest[a.nrest++] = v;
    } else {
      diag_error(p->d, arg->value->loc, "%s takes at most %d argument%s", name, n - (self ? 1 : 0),
                 n - (self ? 1 : 0) == 1 ? "" : "s");
      ok = false;
      break;
    }
  }
  for (int k = 0; ok && k < n; k++) {
    if (!a.v[k] && !opt[k]) {
      diag_error(p->d, call->loc, "%s: missing argument '%s'", name, names[k]);
      ok = false;
    }
  }
  if (!ok) return val_err(p);
  for (int k = 0; k < n; k++)
    if (a.v[k] && a.v[k]->k == V_ERR) return val_err(p);
  return b->fn(&a);
}
