/* Shape rules, one per op of ops.def (ir_shape_NAME). A rule reads the
 * operand dtypes and shapes and the node's attributes, and either writes the
 * result types or a one-line message "op: what is wrong" into cx->err (with
 * cx->bad_operand naming the operand at fault) and returns false.
 * Rules assume operand shapes are valid (rank <= IR_MAX_RANK, dims >= 1);
 * ir_build checks the results for element-count overflow afterwards.
 * Attribute values may come from parsed text, so every integer is checked
 * before it is used in arithmetic. */
#include <stdarg.h>
#include <string.h>

#include "ir.h"

#define SHAPE_BUF 200

static const char *opname(const IrShapeCtx *cx) {
  return ir_ops[cx->node->op].name;
}

bool ir_shape_fail(IrShapeCtx *cx, int bad, const char *fmt, ...) {
  cx->bad_operand = bad;
  int k = snprintf(cx->err, cx->errlen, "%s: ", opname(cx));
  if (k < 0 || (size_t)k >= cx->errlen) return false;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cx->err + k, cx->errlen - (size_t)k, fmt, ap);
  va_end(ap);
  return false;
}

/* Formats a shape into one of a few rotating buffers, so that a message can
 * name several shapes. */
static const char *sh(const IrShape *s) {
  static _Thread_local char bufs[4][SHAPE_BUF];
  static _Thread_local int next;
  char *b = bufs[next++ & 3];
  return ir_shape_str(b, SHAPE_BUF, s);
}

static const IrShape *in_shape(const IrShapeCtx *cx, int i) {
  return cx->in_shape[i];
}
static int rank(const IrShapeCtx *cx, int i) {
  return cx->in_shape[i]->rank;
}
static int64_t dim(const IrShapeCtx *cx, int i, int d) {
  return cx->in_shape[i]->d[d];
}
static int64_t last(const IrShapeCtx *cx, int i) {
  return dim(cx, i, rank(cx, i) - 1);
}
static const char *dt(const IrShapeCtx *cx, int i) {
  return ir_dtype_name(cx->in_dtype[i]);
}

static const IrAttrVal *attr(const IrShapeCtx *cx, IrAttrId id) {
  return &cx->node->attrs.v[id];
}
static bool has(const IrShapeCtx *cx, IrAttrId id) {
  return ir_attrs_has(&cx->node->attrs, id);
}

static bool is_int(IrDType t) {
  return t == IR_I32 || t == IR_I64 || t == IR_U8;
}

static void set_out(IrShapeCtx *cx, IrDType t, const IrShape *s) {
  cx->out_dtype[0] = t;
  cx->out_shape[0] = *s;
}

static void set_scalar(IrShapeCtx *cx, IrDType t) {
  cx->out_dtype[0] = t;
  memset(&cx->out_shape[0], 0, sizeof(IrShape));
}

/* Result j (> 0): the saved statistics are f32 vectors [n] or shapes. */
static void set_outj(IrShapeCtx *cx, int j, IrDType t, const IrShape *s) {
  cx->out_dtype[j] = t;
  cx->out_shape[j] = *s;
}

static IrShape vec_shape(int64_t n) {
  IrShape s = {.rank = 1};
  s.d[0] = n;
  return s;
}

/* ---- checks shared by the rules ---- */

static bool need_float(IrShapeCtx *cx, int i) {
  if (ir_dtype_is_float(cx->in_dtype[i])) return true;
  if (cx->nin == 1)
    return ir_shape_fail(cx, i, "expected a floating-point dtype, got %s", dt(cx, i));
  return ir_shape_fail(cx, i, "operand %d: expected a floating-point dtype, got %s", i, dt(cx, i));
}

static bool need_int(IrShapeCtx *cx, int i, const char *what) {
  if (is_int(cx->in_dtype[i])) return true;
  return ir_shape_fail(cx, i, "%s must have an integer dtype, got %s", what, dt(cx, i));
}

static bool same_dtype(IrShapeCtx *cx, int i, int j) {
  if (cx->in_dtype[i] == cx->in_dtype[j]) return true;
  return ir_shape_fail(cx, j, "operand dtypes differ: %s and %s", dt(cx, i), dt(cx, j));
}

static bool need_rank(IrShapeCtx *cx, int i, int r, const char *what) {
  if (rank(cx, i) == r) return true;
  return ir_shape_fail(cx, i, "%s must have rank %d, got %s", what, r, sh(in_shape(cx, i)));
}

static bool need_rank_min(IrShapeCtx *cx, int i, int r, const char *what) {
  if (rank(cx, i) >= r) return true;
  return ir_shape_fail(cx, i, "%s must have rank >= %d, got %s", what, r, sh(in_shape(cx, i)));
}

/* Operand i must be the vector [c] (weights and biases of norms, conv bias). */
static bool need_vec(IrShapeCtx *cx, int i, int64_t c, const char *what) {
  if (rank(cx, i) == 1 && dim(cx, i, 0) == c) return true;
  return ir_shape_fail(cx, i, "%s must have shape [%lld], got %s", what, (long long)c,
                       sh(in_shape(cx, i)));
}

/* Numpy broadcasting of a and b (aligned at the trailing dim) into out;
 * `what` names the pair in the message. */
static bool broadcast(IrShapeCtx *cx, const IrShape *a, const IrShape *b, IrShape *out, int bad) {
  int r = a->rank > b->rank ? a->rank : b->rank;
  out->rank = r;
  for (int k = 0; k < r; k++) {
    int ia = k - (r - a->rank), ib = k - (r - b->rank);
    int64_t da = ia >= 0 ? a->d[ia] : 1, db = ib >= 0 ? b->d[ib] : 1;
    if (da != db && da != 1 && db != 1)
      return ir_shape_fail(cx, bad, "shapes %s and %s do not broadcast (dim %d: %lld vs %lld)",
                           sh(a), sh(b), k, (long long)da, (long long)db);
    out->d[k] = da == 1 ? db : da;
  }
  return true;
}

/* Normalises a (possibly negative) axis of a rank-r operand. */
static bool norm_axis(IrShapeCtx *cx, int64_t axis, int r, int *out) {
  if (axis < -r || axis >= r)
    return ir_shape_fail(cx, 0, "axis %lld is out of range for rank %d", (long long)axis, r);
  *out = (int)(axis < 0 ? axis + r : axis);
  return true;
}

/* ---- elementwise ---- */

static bool binary(IrShapeCtx *cx, bool float_only) {
  if (!same_dtype(cx, 0, 1)) return false;
  if (float_only && !need_float(cx, 0)) return false;
  IrShape out;
  if (!broadcast(cx, in_shape(cx, 0), in_shape(cx, 1), &out, 1)) return false;
  set_out(cx, cx->in_dtype[0], &out);
  return true;
}

static bool unary(IrShapeCtx *cx, bool float_only) {
  if (float_only && !need_float(cx, 0)) return false;
  set_out(cx, cx->in_dtype[0], in_shape(cx, 0));
  return true;
}

/* add, sub, mul, div: numpy broadcasting, any dtype */
bool ir_shape_BINARY(IrShapeCtx *cx) {
  return binary(cx, false);
}
bool ir_shape_POW(IrShapeCtx *cx) {
  return binary(cx, true);
}
/* a unary op: y like x (UNARY: any dtype; FLOAT_UNARY: float) */
bool ir_shape_UNARY(IrShapeCtx *cx) {
  return unary(cx, false);
}
bool ir_shape_FLOAT_UNARY(IrShapeCtx *cx) {
  return unary(cx, true);
}

bool ir_shape_CAST(IrShapeCtx *cx) {
  int64_t t = attr(cx, IR_ATTR_DTYPE)->i;
  if (t < 0 || t >= IR_DTYPE_COUNT)
    return ir_shape_fail(cx, -1, "invalid dtype #%lld", (long long)t);
  set_out(cx, (IrDType)t, in_shape(cx, 0));
  return true;
}

bool ir_shape_DROPOUT(IrShapeCtx *cx) {
  double p = attr(cx, IR_ATTR_P)->f;
  if (!(p >= 0 && p < 1)) return ir_shape_fail(cx, -1, "p must be in [0, 1), got %g", p);
  return unary(cx, true);
}

/* ---- creation ---- */

/* Reads a shape attribute (dims >= 1) into s. */
static bool shape_attr(IrShapeCtx *cx, IrAttrId id, IrShape *s) {
  const IrAttrVal *v = attr(cx, id);
  if (v->nints > IR_MAX_RANK)
    return ir_shape_fail(cx, -1, "%s has rank %d, more than the maximum %d", ir_attrs[id].name,
                         v->nints, IR_MAX_RANK);
  s->rank = v->nints;
  for (int i = 0; i < v->nints; i++) {
    if (v->ints[i] < 1)
      return ir_shape_fail(cx, -1, "%s dim %d is %lld; dims must be >= 1", ir_attrs[id].name, i,
                           (long long)v->ints[i]);
    s->d[i] = v->ints[i];
  }
  return true;
}

bool ir_shape_FULL(IrShapeCtx *cx) {
  IrShape s = {0};
  if (!shape_attr(cx, IR_ATTR_SHAPE, &s)) return false;
  int64_t t = attr(cx, IR_ATTR_DTYPE)->i;
  if (t < 0 || t >= IR_DTYPE_COUNT)
    return ir_shape_fail(cx, -1, "invalid dtype #%lld", (long long)t);
  set_out(cx, (IrDType)t, &s);
  return true;
}

/* ---- contractions ---- */

bool ir_shape_MATMUL(IrShapeCtx *cx) {
  if (!need_rank_min(cx, 0, 2, "operand 0") || !need_rank_min(cx, 1, 2, "operand 1")) return false;
  if (!same_dtype(cx, 0, 1) || !need_float(cx, 0)) return false;
  int ra = rank(cx, 0), rb = rank(cx, 1);
  int64_t k0 = dim(cx, 0, ra - 1), k1 = dim(cx, 1, rb - 2);
  if (k0 != k1)
    return ir_shape_fail(cx, 1, "inner dimensions differ: %lld vs %lld", (long long)k0,
                         (long long)k1);
  IrShape ba = *in_shape(cx, 0), bb = *in_shape(cx, 1), out;
  ba.rank -= 2;
  bb.rank -= 2;
  if (!broadcast(cx, &ba, &bb, &out, 1)) return false;
  out.d[out.rank++] = dim(cx, 0, ra - 2);
  out.d[out.rank++] = dim(cx, 1, rb - 1);
  set_out(cx, cx->in_dtype[0], &out);
  return true;
}

/* x[..., F] by a weight [N, K] whose dim `in` is F: x with its last dim the
 * weight's other dim (linear: in = 1; linear_grad_x: in = 0) */
static bool by_weight(IrShapeCtx *cx, int in, const char *x, const char *feat, const char *verb) {
  if (!need_rank_min(cx, 0, 1, x) || !need_rank(cx, 1, 2, "weight")) return false;
  if (!same_dtype(cx, 0, 1) || !need_float(cx, 0)) return false;
  if (last(cx, 0) != dim(cx, 1, in))
    return ir_shape_fail(cx, 1, "%s features differ: %s %s has %lld, weight %s %s %lld", feat, x,
                         sh(in_shape(cx, 0)), (long long)last(cx, 0), sh(in_shape(cx, 1)), verb,
                         (long long)dim(cx, 1, in));
  IrShape out = *in_shape(cx, 0);
  out.d[out.rank - 1] = dim(cx, 1, 1 - in);
  set_out(cx, cx->in_dtype[0], &out);
  return true;
}

bool ir_shape_LINEAR(IrShapeCtx *cx) {
  return by_weight(cx, 1, "input", "input", "expects");
}

/* The convolution geometry of x[B, Cin, *spatial] and w[Cout, Cin, *kernel]
 * with the node's stride and padding: out[B, Cout, (dim + 2 * pad - kernel)
 * / stride + 1 ...]. bx and bw are the operand indices to blame (-1: an
 * attribute). */
static bool conv_geom(IrShapeCtx *cx, const IrShape *x, const IrShape *w, int nsp, int bx, int bw,
                      IrShape *out) {
  int r = nsp + 2;
  if (x->rank != r) return ir_shape_fail(cx, bx, "input must have rank %d, got %s", r, sh(x));
  if (w->rank != r) return ir_shape_fail(cx, bw, "weight must have rank %d, got %s", r, sh(w));
  if (x->d[1] != w->d[1])
    return ir_shape_fail(cx, bw, "input channels differ: input %s has %lld, weight %s expects %lld",
                         sh(x), (long long)x->d[1], sh(w), (long long)w->d[1]);
  const IrAttrVal *st = attr(cx, IR_ATTR_STRIDE), *pd = attr(cx, IR_ATTR_PADDING);
  if (st->nints != nsp)
    return ir_shape_fail(cx, -1, "stride needs %d values, got %d", nsp, st->nints);
  if (pd->nints != nsp)
    return ir_shape_fail(cx, -1, "padding needs %d values, got %d", nsp, pd->nints);
  *out = (IrShape){.rank = r};
  out->d[0] = x->d[0];
  out->d[1] = w->d[0];
  for (int i = 0; i < nsp; i++) {
    int64_t s = st->ints[i], p = pd->ints[i], xd = x->d[2 + i], k = w->d[2 + i];
    if (s < 1 || s > INT32_MAX)
      return ir_shape_fail(cx, -1, "stride %lld must be in [1, 2^31)", (long long)s);
    if (p < 0 || p > INT32_MAX)
      return ir_shape_fail(cx, -1, "padding %lld must be in [0, 2^31)", (long long)p);
    if (xd + 2 * p < k)
      return ir_shape_fail(cx, bw,
                           "kernel %lld is larger than input dim %d of size %lld with padding %lld",
                           (long long)k, 2 + i, (long long)xd, (long long)p);
    out->d[2 + i] = (xd + 2 * p - k) / s + 1;
  }
  return true;
}

static bool conv(IrShapeCtx *cx, int nsp) {
  if (!need_rank(cx, 0, nsp + 2, "input") || !need_rank(cx, 1, nsp + 2, "weight")) return false;
  if (!same_dtype(cx, 0, 1) || !need_float(cx, 0)) return false;
  IrShape out;
  if (!conv_geom(cx, in_shape(cx, 0), in_shape(cx, 1), nsp, 0, 1, &out)) return false;
  if (cx->nin == 3) {
    if (!same_dtype(cx, 0, 2) || !need_vec(cx, 2, out.d[1], "bias")) return false;
  }
  set_out(cx, cx->in_dtype[0], &out);
  return true;
}

bool ir_shape_CONV2D(IrShapeCtx *cx) {
  return conv(cx, 2);
}
bool ir_shape_CONV3D(IrShapeCtx *cx) {
  return conv(cx, 3);
}

/* ---- normalisation ---- */

static bool need_eps(IrShapeCtx *cx) {
  double e = attr(cx, IR_ATTR_EPS)->f;
  if (!(e >= 0) || e > 1e300)
    return ir_shape_fail(cx, -1, "eps must be a finite non-negative number, got %g", e);
  return true;
}

/* Optional weight (operand 1) and bias (operand 2) of shape [c]. */
static bool affine(IrShapeCtx *cx, int64_t c) {
  static const char *const what[] = {"", "weight", "bias"};
  for (int i = 1; i < cx->nin; i++)
    if (!same_dtype(cx, 0, i) || !need_vec(cx, i, c, what[i])) return false;
  return true;
}

/* layer_norm's axis attribute, when set, against operand x: a dim before
 * the last (the last is the default, and is left unset) */
static bool need_norm_axis(IrShapeCtx *cx, int x) {
  if (!has(cx, IR_ATTR_AXIS)) return true;
  int64_t a = attr(cx, IR_ATTR_AXIS)->i;
  if (a < 0 || a >= rank(cx, x) - 1)
    return ir_shape_fail(cx, x,
                         "axis %lld must be a dim before the last of %s (the last is the "
                         "default)",
                         (long long)a, sh(in_shape(cx, x)));
  return true;
}

/* y like x, then `nstats` f32 vectors [numel(x) / C] (mean, rstd); C is
 * the last dim, or layer_norm's axis. */
static bool norm_last(IrShapeCtx *cx, int nstats) {
  if (!need_rank_min(cx, 0, 1, "input") || !need_float(cx, 0) || !need_eps(cx) ||
      !need_norm_axis(cx, 0))
    return false;
  int64_t c = dim(cx, 0, ir_norm_dim(&cx->node->attrs, in_shape(cx, 0)));
  if (!affine(cx, c)) return false;
  IrShape st = vec_shape(ir_numel(in_shape(cx, 0)) / c);
  for (int j = 1; j <= nstats; j++) set_outj(cx, j, IR_F32, &st);
  return unary(cx, true);
}

bool ir_shape_LAYER_NORM(IrShapeCtx *cx) {
  return norm_last(cx, 2);
}
bool ir_shape_RMS_NORM(IrShapeCtx *cx) {
  return norm_last(cx, 1);
}

/* groups attr against x[B, C, ...]; *ng = B * groups */
static bool groups_of(IrShapeCtx *cx, int x, int64_t *ng) {
  int64_t g = attr(cx, IR_ATTR_GROUPS)->i, c = dim(cx, x, 1);
  if (g < 1) return ir_shape_fail(cx, -1, "groups must be >= 1, got %lld", (long long)g);
  if (c % g)
    return ir_shape_fail(cx, x, "%lld channels do not divide into %lld groups", (long long)c,
                         (long long)g);
  *ng = dim(cx, x, 0) * g; /* <= numel(x) */
  return true;
}

bool ir_shape_GROUP_NORM(IrShapeCtx *cx) {
  if (!need_rank_min(cx, 0, 2, "input") || !need_float(cx, 0) || !need_eps(cx)) return false;
  int64_t ng = 0;
  if (!groups_of(cx, 0, &ng) || !affine(cx, dim(cx, 0, 1))) return false;
  IrShape st = vec_shape(ng);
  set_outj(cx, 1, IR_F32, &st);
  set_outj(cx, 2, IR_F32, &st);
  return unary(cx, true);
}

bool ir_shape_SOFTMAX(IrShapeCtx *cx) {
  int ax = 0;
  if (!need_float(cx, 0) || !norm_axis(cx, attr(cx, IR_ATTR_AXIS)->i, rank(cx, 0), &ax))
    return false;
  return unary(cx, true);
}

bool ir_shape_LOG_SOFTMAX(IrShapeCtx *cx) {
  return ir_shape_SOFTMAX(cx);
}

/* ---- reductions ---- */

static bool reduce(IrShapeCtx *cx, bool float_only) {
  if (float_only && !need_float(cx, 0)) return false;
  const IrAttrVal *ax = attr(cx, IR_ATTR_AXES);
  int r = rank(cx, 0);
  bool keep = has(cx, IR_ATTR_KEEPDIM) && attr(cx, IR_ATTR_KEEPDIM)->i;
  if (ax->nints == 0) return ir_shape_fail(cx, -1, "axes is empty");
  bool reduced[IR_MAX_RANK] = {0};
  for (int i = 0; i < ax->nints; i++) {
    int a = 0;
    if (!norm_axis(cx, ax->ints[i], r, &a)) return false;
    if (reduced[a]) return ir_shape_fail(cx, -1, "axis %d is listed twice", a);
    reduced[a] = true;
  }
  IrShape out = {0};
  for (int i = 0; i < r; i++) {
    if (!reduced[i])
      out.d[out.rank++] = dim(cx, 0, i);
    else if (keep)
      out.d[out.rank++] = 1;
  }
  set_out(cx, cx->in_dtype[0], &out);
  return true;
}

bool ir_shape_SUM(IrShapeCtx *cx) {
  return reduce(cx, false);
}
bool ir_shape_MEAN(IrShapeCtx *cx) {
  return reduce(cx, true);
}

/* ---- layout ---- */

bool ir_shape_RESHAPE(IrShapeCtx *cx) {
  const IrAttrVal *v = attr(cx, IR_ATTR_SHAPE);
  if (v->nints > IR_MAX_RANK)
    return ir_shape_fail(cx, -1, "shape has rank %d, more than the maximum %d", v->nints,
                         IR_MAX_RANK);
  IrShape out = {.rank = v->nints};
  for (int i = 0; i < v->nints; i++) out.d[i] = v->ints[i];
  int hole = -1;
  int64_t known = 1, n = ir_numel(in_shape(cx, 0));
  for (int i = 0; i < v->nints; i++) {
    int64_t d = v->ints[i];
    if (d == -1) {
      if (hole >= 0) return ir_shape_fail(cx, -1, "shape has more than one -1");
      hole = i;
    } else if (d < 1) {
      return ir_shape_fail(cx, -1, "shape dim %d is %lld; dims must be >= 1 (or one -1)", i,
                           (long long)d);
    } else if (__builtin_mul_overflow(known, d, &known) || known > n) {
      return ir_shape_fail(cx, 0, "cannot reshape %s (%lld elements) into %s", sh(in_shape(cx, 0)),
                           (long long)n, sh(&out));
    }
  }
  if (hole >= 0) {
    if (n % known)
      return ir_shape_fail(cx, 0, "cannot reshape %s (%lld elements) into %s", sh(in_shape(cx, 0)),
                           (long long)n, sh(&out));
    out.d[hole] = n / known;
  } else if (known != n) {
    return ir_shape_fail(cx, 0, "cannot reshape %s (%lld elements) into %s", sh(in_shape(cx, 0)),
                         (long long)n, sh(&out));
  }
  set_out(cx, cx->in_dtype[0], &out);
  return true;
}

bool ir_shape_TRANSPOSE(IrShapeCtx *cx) {
  const IrAttrVal *v = attr(cx, IR_ATTR_PERM);
  int r = rank(cx, 0);
  bool seen[IR_MAX_RANK] = {0};
  bool ok = v->nints == r;
  for (int i = 0; ok && i < r; i++) {
    int64_t p = v->ints[i];
    ok = p >= 0 && p < r && !seen[p];
    if (ok) seen[p] = true;
  }
  if (!ok) {
    IrShape p = {.rank = v->nints > IR_MAX_RANK ? IR_MAX_RANK : v->nints};
    for (int i = 0; i < p.rank; i++) p.d[i] = v->ints[i];
    return ir_shape_fail(cx, -1, "perm %s%s is not a permutation of 0..%d", sh(&p),
                         v->nints > IR_MAX_RANK ? "..." : "", r - 1);
  }
  IrShape out = {.rank = r};
  for (int i = 0; i < r; i++) out.d[i] = dim(cx, 0, (int)v->ints[i]);
  set_out(cx, cx->in_dtype[0], &out);
  return true;
}

bool ir_shape_SLICE(IrShapeCtx *cx) {
  int ax = 0;
  if (!norm_axis(cx, attr(cx, IR_ATTR_AXIS)->i, rank(cx, 0), &ax)) return false;
  int64_t start = attr(cx, IR_ATTR_START)->i, stop = attr(cx, IR_ATTR_STOP)->i;
  int64_t step = has(cx, IR_ATTR_STEP) ? attr(cx, IR_ATTR_STEP)->i : 1, n = dim(cx, 0, ax);
  if (step < 1) return ir_shape_fail(cx, -1, "step must be >= 1, got %lld", (long long)step);
  if (!(0 <= start && start < stop && stop <= n))
    return ir_shape_fail(
        cx, 0,
        "range [%lld:%lld] is not within dim %d of size %lld (need 0 <= start < stop <= %lld)",
        (long long)start, (long long)stop, ax, (long long)n, (long long)n);
  IrShape out = *in_shape(cx, 0);
  out.d[ax] = 1 + (stop - start - 1) / step;
  set_out(cx, cx->in_dtype[0], &out);
  return true;
}

bool ir_shape_CONCAT(IrShapeCtx *cx) {
  if (!need_rank_min(cx, 0, 1, "operand 0")) return false;
  int r = rank(cx, 0), ax = 0;
  if (!norm_axis(cx, attr(cx, IR_ATTR_AXIS)->i, r, &ax)) return false;
  IrShape out = *in_shape(cx, 0);
  for (int i = 1; i < cx->nin; i++) {
    if (!same_dtype(cx, 0, i)) return false;
    if (rank(cx, i) != r)
      return ir_shape_fail(cx, i, "operand %d has rank %d, operand 0 has rank %d", i, rank(cx, i),
                           r);
    for (int d = 0; d < r; d++)
      if (d != ax && dim(cx, i, d) != out.d[d])
        return ir_shape_fail(
            cx, i,
            "operand %d %s differs from operand 0 %s in dim %d (concatenating along axis %d)", i,
            sh(in_shape(cx, i)), sh(in_shape(cx, 0)), d, ax);
    out.d[ax] += dim(cx, i, ax); /* dims are <= 2^53 and there are <= 64 operands */
  }
  set_out(cx, cx->in_dtype[0], &out);
  return true;
}

bool ir_shape_EXPAND(IrShapeCtx *cx) {
  IrShape out = {0};
  if (!shape_attr(cx, IR_ATTR_SHAPE, &out)) return false;
  int r = rank(cx, 0);
  if (out.rank < r)
    return ir_shape_fail(cx, 0, "cannot expand %s to the lower rank %s", sh(in_shape(cx, 0)),
                         sh(&out));
  for (int i = 0; i < r; i++) {
    int k = out.rank - r + i;
    int64_t d = dim(cx, 0, i);
    if (d != 1 && d != out.d[k])
      return ir_shape_fail(cx, 0, "cannot expand %s to %s (dim %d: %lld vs %lld)",
                           sh(in_shape(cx, 0)), sh(&out), k, (long long)d, (long long)out.d[k]);
  }
  set_out(cx, cx->in_dtype[0], &out);
  return true;
}

/* ---- transformer pieces ---- */

bool ir_shape_EMBEDDING(IrShapeCtx *cx) {
  if (!need_int(cx, 0, "ids") || !need_rank(cx, 1, 2, "table")) return false;
  if (rank(cx, 0) + 1 > IR_MAX_RANK)
    return ir_shape_fail(cx, 0, "ids %s leave no room for the embedding dim (max rank %d)",
                         sh(in_shape(cx, 0)), IR_MAX_RANK);
  IrShape out = *in_shape(cx, 0);
  out.d[out.rank++] = dim(cx, 1, 1);
  set_out(cx, cx->in_dtype[1], &out);
  return true;
}

/* pos, when given: i32[B], one start position per row */
static bool rope_pos(IrShapeCtx *cx, int i, int64_t B) {
  if (cx->nin <= i) return true;
  if (cx->in_dtype[i] != IR_I32 || rank(cx, i) != 1 || dim(cx, i, 0) != B)
    return ir_shape_fail(cx, i, "pos must be i32[%lld] (a start position per row), got %s%s",
                         (long long)B, dt(cx, i), sh(in_shape(cx, i)));
  return true;
}

bool ir_shape_ROPE(IrShapeCtx *cx) {
  if (!need_rank(cx, 0, 4, "input [B, T, H, D]") || !need_float(cx, 0)) return false;
  if (!rope_pos(cx, 1, dim(cx, 0, 0))) return false;
  if (last(cx, 0) % 2)
    return ir_shape_fail(cx, 0, "head dim %lld must be even", (long long)last(cx, 0));
  double th = attr(cx, IR_ATTR_THETA)->f;
  if (!(th > 0) || th > 1e300)
    return ir_shape_fail(cx, -1, "theta must be a finite positive number, got %g", th);
  if (has(cx, IR_ATTR_OFFSET) && attr(cx, IR_ATTR_OFFSET)->i < 0)
    return ir_shape_fail(cx, -1, "offset must be >= 0, got %lld",
                         (long long)attr(cx, IR_ATTR_OFFSET)->i);
  return unary(cx, true);
}

/* haar2d x[B, C, H, W] -> [B, 4C, H/2, W/2]; haar3d x[B, C, T, H, W] ->
 * [B, 8C, T/2, H/2, W/2]; ihaar2d / ihaar3d the other way */
bool ir_shape_HAAR(IrShapeCtx *cx) {
  IrOp op = cx->node->op;
  bool three = op == IR_OP_HAAR3D || op == IR_OP_IHAAR3D;
  bool inv = op == IR_OP_IHAAR2D || op == IR_OP_IHAAR3D;
  int64_t S = three ? 8 : 4;
  if (!need_rank(cx, 0, three ? 5 : 4, three ? "x [B, C, T, H, W]" : "x [B, C, H, W]") ||
      !need_float(cx, 0))
    return false;
  IrShape s = *in_shape(cx, 0);
  static const char *axis[5] = {"", "", "T", "H", "W"};
  if (inv) {
    if (s.d[1] % S)
      return ir_shape_fail(
          cx, 0, "channels %lld of %s must be a multiple of %lld (%lld sub-bands per channel)",
          (long long)s.d[1], sh(&s), (long long)S, (long long)S);
    s.d[1] /= S;
    for (int d = 2; d < s.rank; d++) s.d[d] *= 2;
  } else {
    for (int d = 2; d < s.rank; d++)
      if (s.d[d] % 2)
        return ir_shape_fail(cx, 0, "%s = %lld of %s must be even (2x%s blocks)%s",
                             axis[d + (three ? 0 : 1)], (long long)s.d[d], sh(&s),
                             three ? "2x2" : "2",
                             three && d == 2 ? "; for 1 + 2k causal frames, put the first frame "
                                               "in front once more (concat) first"
                                             : "");
    s.d[1] *= S;
    for (int d = 2; d < s.rank; d++) s.d[d] /= 2;
  }
  set_out(cx, cx->in_dtype[0], &s);
  return true;
}

/* x[B, T, C], src[B, N, C], ids i32[B, T] -> [B, T, C] */
bool ir_shape_PLACE(IrShapeCtx *cx) {
  if (!need_rank(cx, 0, 3, "x [B, T, C]") || !need_float(cx, 0) ||
      !need_rank(cx, 1, 3, "src [B, N, C]") || !same_dtype(cx, 0, 1))
    return false;
  if (dim(cx, 1, 0) != dim(cx, 0, 0) || dim(cx, 1, 2) != dim(cx, 0, 2))
    return ir_shape_fail(cx, 1, "src %s must be [%lld, N, %lld] to go into x %s",
                         sh(in_shape(cx, 1)), (long long)dim(cx, 0, 0), (long long)dim(cx, 0, 2),
                         sh(in_shape(cx, 0)));
  if (cx->in_dtype[2] != IR_I32 || rank(cx, 2) != 2 || dim(cx, 2, 0) != dim(cx, 0, 0) ||
      dim(cx, 2, 1) != dim(cx, 0, 1))
    return ir_shape_fail(cx, 2, "ids must be i32[%lld, %lld] (the tokens of x), got %s%s",
                         (long long)dim(cx, 0, 0), (long long)dim(cx, 0, 1), dt(cx, 2),
                         sh(in_shape(cx, 2)));
  if (dim(cx, 1, 1) > dim(cx, 0, 1))
    return ir_shape_fail(cx, 1, "%lld rows of src do not fit in %lld positions",
                         (long long)dim(cx, 1, 1), (long long)dim(cx, 0, 1));
  set_out(cx, cx->in_dtype[0], in_shape(cx, 0));
  return true;
}

/* (dy[B, T, C], ids i32[B, T]) {size = N} -> dx[B, T, C], dsrc[B, N, C] */
bool ir_shape_PLACE_GRAD(IrShapeCtx *cx) {
  if (!need_rank(cx, 0, 3, "dy [B, T, C]") || !need_float(cx, 0)) return false;
  if (cx->in_dtype[1] != IR_I32 || rank(cx, 1) != 2 || dim(cx, 1, 0) != dim(cx, 0, 0) ||
      dim(cx, 1, 1) != dim(cx, 0, 1))
    return ir_shape_fail(cx, 1, "ids must be i32[%lld, %lld], got %s%s", (long long)dim(cx, 0, 0),
                         (long long)dim(cx, 0, 1), dt(cx, 1), sh(in_shape(cx, 1)));
  int64_t n = attr(cx, IR_ATTR_SIZE)->i;
  if (n < 1 || n > dim(cx, 0, 1))
    return ir_shape_fail(cx, -1, "size %lld must be in [1, %lld]", (long long)n,
                         (long long)dim(cx, 0, 1));
  IrShape s = *in_shape(cx, 0);
  set_outj(cx, 0, cx->in_dtype[0], &s);
  s.d[1] = n;
  set_outj(cx, 1, cx->in_dtype[0], &s);
  return true;
}

/* cache[B, S, KVH, D], x[B, n, KVH, D], pos i32[B] (no result) */
bool ir_shape_KV_WRITE(IrShapeCtx *cx) {
  if (!need_rank(cx, 0, 4, "cache [B, S, KVH, D]") || !need_float(cx, 0) ||
      !need_rank(cx, 1, 4, "x [B, n, KVH, D]") || !same_dtype(cx, 0, 1))
    return false;
  if (dim(cx, 1, 0) != dim(cx, 0, 0) || dim(cx, 1, 2) != dim(cx, 0, 2) ||
      dim(cx, 1, 3) != dim(cx, 0, 3) || dim(cx, 1, 1) > dim(cx, 0, 1))
    return ir_shape_fail(cx, 1, "x %s does not fit the cache %s", sh(in_shape(cx, 1)),
                         sh(in_shape(cx, 0)));
  return rope_pos(cx, 2, dim(cx, 0, 0));
}

/* q[B, n, H, D], k_cache, v_cache [B, S, KVH, D], pos i32[B] -> [B, n, H, D] */
bool ir_shape_ATTENTION_CACHED(IrShapeCtx *cx) {
  if (!need_rank(cx, 0, 4, "q [B, n, H, D]") || !need_float(cx, 0) ||
      !need_rank(cx, 1, 4, "k_cache [B, S, KVH, D]") ||
      !need_rank(cx, 2, 4, "v_cache [B, S, KVH, D]") || !same_dtype(cx, 0, 1) ||
      !same_dtype(cx, 0, 2))
    return false;
  if (!ir_shape_eq(in_shape(cx, 1), in_shape(cx, 2)))
    return ir_shape_fail(cx, 2, "the caches differ: k %s, v %s", sh(in_shape(cx, 1)),
                         sh(in_shape(cx, 2)));
  if (dim(cx, 1, 0) != dim(cx, 0, 0) || dim(cx, 1, 3) != dim(cx, 0, 3) ||
      dim(cx, 0, 2) % dim(cx, 1, 2) || dim(cx, 0, 1) > dim(cx, 1, 1))
    return ir_shape_fail(cx, 1, "q %s does not match the cache %s", sh(in_shape(cx, 0)),
                         sh(in_shape(cx, 1)));
  if (!rope_pos(cx, 3, dim(cx, 0, 0))) return false;
  set_out(cx, cx->in_dtype[0], in_shape(cx, 0));
  return true;
}

/* q[B, T, H, D], k[B, S, KVH, D], v[B, S, KVH, Dv] -> [B, T, H, Dv] */
bool ir_shape_ATTENTION(IrShapeCtx *cx) {
  if (!need_rank(cx, 0, 4, "q [B, T, H, D]") || !need_rank(cx, 1, 4, "k [B, S, KVH, D]") ||
      !need_rank(cx, 2, 4, "v [B, S, KVH, Dv]"))
    return false;
  if (!need_float(cx, 0) || !same_dtype(cx, 0, 1) || !same_dtype(cx, 0, 2)) return false;
  if (dim(cx, 1, 0) != dim(cx, 0, 0) || dim(cx, 2, 0) != dim(cx, 0, 0)) {
    int bad = dim(cx, 1, 0) != dim(cx, 0, 0) ? 1 : 2;
    return ir_shape_fail(cx, bad, "batch sizes differ: q %s, %s %s", sh(in_shape(cx, 0)),
                         bad == 1 ? "k" : "v", sh(in_shape(cx, bad)));
  }
  if (dim(cx, 1, 1) != dim(cx, 2, 1) || dim(cx, 1, 2) != dim(cx, 2, 2))
    return ir_shape_fail(cx, 2, "k %s and v %s differ in length or heads", sh(in_shape(cx, 1)),
                         sh(in_shape(cx, 2)));
  if (dim(cx, 0, 3) != dim(cx, 1, 3))
    return ir_shape_fail(cx, 1, "head dims differ: q has %lld, k has %lld",
                         (long long)dim(cx, 0, 3), (long long)dim(cx, 1, 3));
  int64_t h = dim(cx, 0, 2), kvh = dim(cx, 1, 2);
  if (h % kvh)
    return ir_shape_fail(cx, 1, "%lld query heads are not a multiple of %lld key/value heads",
                         (long long)h, (long long)kvh);
  IrShape out = *in_shape(cx, 0);
  out.d[3] = dim(cx, 2, 3);
  set_out(cx, cx->in_dtype[0], &out);
  if (cx->nin > 3 && cx->in_dtype[3] == IR_I32) { /* segments i32[B, T] (self-attention) */
    IrShape want = {.rank = 2, .d = {dim(cx, 0, 0), dim(cx, 0, 1)}};
    if (dim(cx, 1, 1) != dim(cx, 0, 1))
      return ir_shape_fail(cx, 3, "segments (i32) need self-attention: %lld queries, %lld keys",
                           (long long)dim(cx, 0, 1), (long long)dim(cx, 1, 1));
    if (!ir_shape_eq(in_shape(cx, 3), &want))
      return ir_shape_fail(cx, 3, "the segments must be i32%s (batch, tokens), got %s", sh(&want),
                           sh(in_shape(cx, 3)));
  } else if (cx->nin > 3) { /* the key mask f32[B, S] */
    IrShape want = {.rank = 2, .d = {dim(cx, 0, 0), dim(cx, 1, 1)}};
    if (cx->in_dtype[3] != IR_F32 || !ir_shape_eq(in_shape(cx, 3), &want))
      return ir_shape_fail(cx, 3, "the key mask must be f32%s (batch, keys), got %s%s", sh(&want),
                           dt(cx, 3), sh(in_shape(cx, 3)));
  }
  IrShape lse = {.rank = 3, .d = {dim(cx, 0, 0), dim(cx, 0, 2), dim(cx, 0, 1)}};
  set_outj(cx, 1, IR_F32, &lse);
  return true;
}

/* ---- losses ---- */

bool ir_shape_CROSS_ENTROPY(IrShapeCtx *cx) {
  if (!need_rank_min(cx, 0, 1, "logits") || !need_float(cx, 0) || !need_int(cx, 1, "labels"))
    return false;
  IrShape want = *in_shape(cx, 0);
  want.rank--;
  if (!ir_shape_eq(&want, in_shape(cx, 1)))
    return ir_shape_fail(cx, 1,
                         "labels %s must have the shape of logits %s without its last dim, %s",
                         sh(in_shape(cx, 1)), sh(in_shape(cx, 0)), sh(&want));
  set_scalar(cx, IR_F32);
  IrShape lse = vec_shape(ir_numel(in_shape(cx, 1)));
  set_outj(cx, 1, IR_F32, &lse);
  return true;
}

bool ir_shape_MSE(IrShapeCtx *cx) {
  if (!same_dtype(cx, 0, 1) || !need_float(cx, 0)) return false;
  if (!ir_shape_eq(in_shape(cx, 0), in_shape(cx, 1)))
    return ir_shape_fail(cx, 1, "shapes differ: %s and %s", sh(in_shape(cx, 0)),
                         sh(in_shape(cx, 1)));
  set_scalar(cx, IR_F32);
  return true;
}

/* ---- backward ops ---- */

bool ir_shape_SUM_TO(IrShapeCtx *cx) {
  IrShape to = {0};
  if (!shape_attr(cx, IR_ATTR_SHAPE, &to)) return false;
  const IrShape *x = in_shape(cx, 0);
  bool ok = to.rank <= x->rank;
  for (int i = 0; ok && i < to.rank; i++) {
    int64_t d = x->d[x->rank - to.rank + i];
    ok = to.d[i] == 1 || to.d[i] == d;
  }
  if (!ok)
    return ir_shape_fail(cx, 0, "%s does not broadcast to the operand's shape %s", sh(&to), sh(x));
  set_out(cx, cx->in_dtype[0], &to);
  return true;
}

bool ir_shape_PAD_SLICE(IrShapeCtx *cx) {
  int ax = 0;
  if (!norm_axis(cx, attr(cx, IR_ATTR_AXIS)->i, rank(cx, 0), &ax)) return false;
  int64_t start = attr(cx, IR_ATTR_START)->i, stop = attr(cx, IR_ATTR_STOP)->i,
          n = attr(cx, IR_ATTR_SIZE)->i;
  int64_t step = has(cx, IR_ATTR_STEP) ? attr(cx, IR_ATTR_STEP)->i : 1;
  if (step < 1) return ir_shape_fail(cx, -1, "step must be >= 1, got %lld", (long long)step);
  if (!(0 <= start && start < stop && stop <= n))
    return ir_shape_fail(cx, -1, "range [%lld:%lld] is not within a dim of size %lld",
                         (long long)start, (long long)stop, (long long)n);
  int64_t want = 1 + (stop - start - 1) / step;
  if (dim(cx, 0, ax) != want)
    return ir_shape_fail(cx, 0, "dim %d of %s must be %lld, the length of [%lld:%lld:%lld]", ax,
                         sh(in_shape(cx, 0)), (long long)want, (long long)start, (long long)stop,
                         (long long)step);
  IrShape out = *in_shape(cx, 0);
  out.d[ax] = n;
  set_out(cx, cx->in_dtype[0], &out);
  return true;
}

/* (dy, x) of the same float dtype and shape -> like x */
/* ACT_grad(dy, x): dy * act'(x), like x */
bool ir_shape_ACT_GRAD(IrShapeCtx *cx) {
  if (!need_float(cx, 0) || !same_dtype(cx, 0, 1)) return false;
  if (!ir_shape_eq(in_shape(cx, 0), in_shape(cx, 1)))
    return ir_shape_fail(cx, 1, "shapes differ: dy %s, x %s", sh(in_shape(cx, 0)),
                         sh(in_shape(cx, 1)));
  set_out(cx, cx->in_dtype[1], in_shape(cx, 1));
  return true;
}

/* dy[..., N], w[N, K] -> [..., K] */
bool ir_shape_LINEAR_GRAD_X(IrShapeCtx *cx) {
  return by_weight(cx, 0, "dy", "output", "gives");
}

/* dy[..., N], x[..., K] -> [N, K] */
bool ir_shape_LINEAR_GRAD_W(IrShapeCtx *cx) {
  if (!need_rank_min(cx, 0, 1, "dy") || !same_dtype(cx, 0, 1) || !need_float(cx, 0)) return false;
  bool ok = rank(cx, 0) == rank(cx, 1);
  for (int i = 0; ok && i < rank(cx, 0) - 1; i++) ok = dim(cx, 0, i) == dim(cx, 1, i);
  if (!ok)
    return ir_shape_fail(cx, 1, "rows differ: dy %s, x %s", sh(in_shape(cx, 0)),
                         sh(in_shape(cx, 1)));
  IrShape out = {.rank = 2, .d = {last(cx, 0), last(cx, 1)}};
  set_out(cx, cx->in_dtype[0], &out);
  return true;
}

/* dy must be the forward conv output of (x, w); `shape` gives the one of
 * the two that is not an operand. */
static bool conv_grad(IrShapeCtx *cx, int nsp, bool wrt_x) {
  IrShape given = {0}, out;
  if (!shape_attr(cx, IR_ATTR_SHAPE, &given)) return false;
  if (!same_dtype(cx, 0, 1) || !need_float(cx, 0)) return false;
  const IrShape *x = wrt_x ? &given : in_shape(cx, 1), *w = wrt_x ? in_shape(cx, 1) : &given;
  if (!conv_geom(cx, x, w, nsp, wrt_x ? -1 : 1, wrt_x ? 1 : -1, &out)) return false;
  if (!ir_shape_eq(&out, in_shape(cx, 0)))
    return ir_shape_fail(cx, 0, "dy %s is not the convolution output %s", sh(in_shape(cx, 0)),
                         sh(&out));
  set_out(cx, cx->in_dtype[0], &given);
  return true;
}

bool ir_shape_CONV2D_GRAD_X(IrShapeCtx *cx) {
  return conv_grad(cx, 2, true);
}
bool ir_shape_CONV2D_GRAD_W(IrShapeCtx *cx) {
  return conv_grad(cx, 2, false);
}
bool ir_shape_CONV3D_GRAD_X(IrShapeCtx *cx) {
  return conv_grad(cx, 3, true);
}
bool ir_shape_CONV3D_GRAD_W(IrShapeCtx *cx) {
  return conv_grad(cx, 3, false);
}

/* Operand i must be f32[n] (saved statistics). */
static bool need_stats(IrShapeCtx *cx, int i, int64_t n, const char *what) {
  if (cx->in_dtype[i] != IR_F32)
    return ir_shape_fail(cx, i, "%s must be f32, got %s", what, dt(cx, i));
  return need_vec(cx, i, n, what);
}

/* (dy, x, stats..., w?) -> dx like x, then nparam vectors [C] (dw, db);
 * C is the last dim (layer_norm_grad: or its axis), or dim 1 when groups
 * are given. */
static bool norm_grad(IrShapeCtx *cx, int nstats, int nparam, bool grouped) {
  if (!need_rank_min(cx, 1, grouped ? 2 : 1, "x") || !need_float(cx, 1) || !same_dtype(cx, 1, 0) ||
      !need_eps(cx) || !need_norm_axis(cx, 1))
    return false;
  if (!ir_shape_eq(in_shape(cx, 0), in_shape(cx, 1)))
    return ir_shape_fail(cx, 0, "dy %s and x %s differ", sh(in_shape(cx, 0)), sh(in_shape(cx, 1)));
  int64_t c = grouped ? dim(cx, 1, 1) : dim(cx, 1, ir_norm_dim(&cx->node->attrs, in_shape(cx, 1)));
  int64_t n = ir_numel(in_shape(cx, 1)) / c;
  if (grouped && !groups_of(cx, 1, &n)) return false;
  static const char *const stat_names[] = {"mean", "rstd"};
  for (int i = 0; i < nstats; i++)
    if (!need_stats(cx, 2 + i, n, nstats == 1 ? "rstd" : stat_names[i])) return false;
  int w = 2 + nstats;
  if (cx->nin > w && (!same_dtype(cx, 1, w) || !need_vec(cx, w, c, "weight"))) return false;
  set_out(cx, cx->in_dtype[1], in_shape(cx, 1));
  IrShape v = vec_shape(c);
  for (int j = 1; j <= nparam; j++) set_outj(cx, j, cx->in_dtype[1], &v);
  return true;
}

bool ir_shape_LAYER_NORM_GRAD(IrShapeCtx *cx) {
  return norm_grad(cx, 2, 2, false);
}
bool ir_shape_RMS_NORM_GRAD(IrShapeCtx *cx) {
  return norm_grad(cx, 1, 1, false);
}
bool ir_shape_GROUP_NORM_GRAD(IrShapeCtx *cx) {
  return norm_grad(cx, 2, 2, true);
}

bool ir_shape_SOFTMAX_GRAD(IrShapeCtx *cx) {
  int ax = 0;
  if (!ir_shape_ACT_GRAD(cx) || !norm_axis(cx, attr(cx, IR_ATTR_AXIS)->i, rank(cx, 0), &ax))
    return false;
  return true;
}

bool ir_shape_LOG_SOFTMAX_GRAD(IrShapeCtx *cx) {
  return ir_shape_SOFTMAX_GRAD(cx);
}

/* dy[..., C], ids[...] {shape = [V, C]} -> [V, C] */
bool ir_shape_EMBEDDING_GRAD(IrShapeCtx *cx) {
  IrShape to = {0};
  if (!shape_attr(cx, IR_ATTR_SHAPE, &to) || !need_float(cx, 0) || !need_int(cx, 1, "ids"))
    return false;
  if (to.rank != 2) return ir_shape_fail(cx, -1, "shape %s must be the table's [V, C]", sh(&to));
  IrShape want = *in_shape(cx, 1);
  if (want.rank + 1 > IR_MAX_RANK)
    return ir_shape_fail(cx, 1, "ids %s have too high a rank", sh(&want));
  want.d[want.rank++] = to.d[1];
  if (!ir_shape_eq(&want, in_shape(cx, 0)))
    return ir_shape_fail(cx, 0, "dy %s must be the ids' shape and the embedding dim, %s",
                         sh(in_shape(cx, 0)), sh(&want));
  set_out(cx, cx->in_dtype[0], &to);
  return true;
}

bool ir_shape_ROPE_GRAD(IrShapeCtx *cx) {
  return ir_shape_ROPE(cx);
}

/* (dy, q, k, v, out, lse, mask?) -> dq, dk, dv */
bool ir_shape_ATTENTION_GRAD(IrShapeCtx *cx) {
  IrShapeCtx fwd = *cx; /* the forward rule on (q, k, v, mask?) */
  fwd.nin = cx->nin > 6 ? 4 : 3;
  for (int i = 0; i < 3; i++) {
    fwd.in_dtype[i] = cx->in_dtype[i + 1];
    fwd.in_shape[i] = cx->in_shape[i + 1];
  }
  if (cx->nin > 6) {
    fwd.in_dtype[3] = cx->in_dtype[6];
    fwd.in_shape[3] = cx->in_shape[6];
  }
  if (!ir_shape_ATTENTION(&fwd)) {
    cx->bad_operand = fwd.bad_operand == 3 ? 6 : fwd.bad_operand >= 0 ? fwd.bad_operand + 1 : -1;
    return false;
  }
  for (int i = 0; i < 5; i += 4) { /* dy and out */
    if (!same_dtype(cx, 1, i)) return false;
    if (!ir_shape_eq(in_shape(cx, i), &fwd.out_shape[0]))
      return ir_shape_fail(cx, i, "%s %s must have the attention output's shape %s",
                           i ? "out" : "dy", sh(in_shape(cx, i)), sh(&fwd.out_shape[0]));
  }
  if (cx->in_dtype[5] != IR_F32 || !ir_shape_eq(in_shape(cx, 5), &fwd.out_shape[1]))
    return ir_shape_fail(cx, 5, "lse must be f32%s, got %s%s", sh(&fwd.out_shape[1]), dt(cx, 5),
                         sh(in_shape(cx, 5)));
  for (int j = 0; j < 3; j++) set_outj(cx, j, cx->in_dtype[j + 1], in_shape(cx, j + 1));
  return true;
}

/* (dloss f32[], logits, labels, lse) -> dlogits */
bool ir_shape_CROSS_ENTROPY_GRAD(IrShapeCtx *cx) {
  if (cx->in_dtype[0] != IR_F32 || rank(cx, 0) != 0)
    return ir_shape_fail(cx, 0, "dloss must be f32[], got %s%s", dt(cx, 0), sh(in_shape(cx, 0)));
  IrShapeCtx fwd = *cx;
  fwd.nin = 2;
  fwd.in_dtype[0] = cx->in_dtype[1], fwd.in_shape[0] = cx->in_shape[1];
  fwd.in_dtype[1] = cx->in_dtype[2], fwd.in_shape[1] = cx->in_shape[2];
  if (!ir_shape_CROSS_ENTROPY(&fwd)) {
    cx->bad_operand = fwd.bad_operand >= 0 ? fwd.bad_operand + 1 : -1;
    return false;
  }
  if (!need_stats(cx, 3, fwd.out_shape[1].d[0], "lse")) return false;
  set_out(cx, cx->in_dtype[1], in_shape(cx, 1));
  return true;
}

/* ---- optimizer ops ---- */

static bool need_scalar(IrShapeCtx *cx, int i, const char *what) {
  if (cx->in_dtype[i] == IR_F32 && rank(cx, i) == 0) return true;
  return ir_shape_fail(cx, i, "%s must be f32[], got %s%s", what, dt(cx, i), sh(in_shape(cx, i)));
}

bool ir_shape_GRAD_NORM(IrShapeCtx *cx) {
  for (int i = 0; i < cx->nin; i++)
    if (!need_float(cx, i)) return false;
  set_scalar(cx, IR_F32);
  return true;
}

bool ir_shape_CLIP_SCALE(IrShapeCtx *cx) {
  double v = attr(cx, IR_ATTR_VALUE)->f;
  if (!(v > 0) || v > 1e300)
    return ir_shape_fail(cx, -1, "value must be a finite positive number, got %g", v);
  if (!need_scalar(cx, 0, "norm")) return false;
  set_scalar(cx, IR_F32);
  return true;
}

/* Operands 0 .. ntensor-1 are float tensors of one shape (param, grad and
 * state); the rest are f32[] scalars named in `scalars`. Every FLOAT
 * attribute must be finite and >= 0. */
static bool step_op(IrShapeCtx *cx, int ntensor, const char *const *names) {
  for (int k = 0; k < IR_ATTR_COUNT; k++)
    if (has(cx, (IrAttrId)k) && ir_attrs[k].kind == IR_AK_FLOAT) {
      double f = attr(cx, (IrAttrId)k)->f;
      if (!(f >= 0) || f > 1e300)
        return ir_shape_fail(cx, -1, "%s must be a finite number >= 0, got %g", ir_attrs[k].name,
                             f);
    }
  if (!need_float(cx, 0)) return false;
  for (int i = 1; i < ntensor; i++) {
    if (!same_dtype(cx, 0, i)) return false;
    if (!ir_shape_eq(in_shape(cx, 0), in_shape(cx, i)))
      return ir_shape_fail(cx, i, "%s %s differs from param %s", names[i], sh(in_shape(cx, i)),
                           sh(in_shape(cx, 0)));
  }
  for (int i = ntensor; i < cx->nin; i++)
    if (!need_scalar(cx, i, names[i])) return false;
  return true;
}

bool ir_shape_ADAMW(IrShapeCtx *cx) {
  static const char *const names[] = {"param", "grad", "m", "v", "lr", "step", "scale"};
  if (attr(cx, IR_ATTR_BETA1)->f >= 1 || attr(cx, IR_ATTR_BETA2)->f >= 1)
    return ir_shape_fail(cx, -1, "beta1 and beta2 must be < 1, got %g and %g",
                         attr(cx, IR_ATTR_BETA1)->f, attr(cx, IR_ATTR_BETA2)->f);
  return step_op(cx, 4, names);
}

bool ir_shape_SGD(IrShapeCtx *cx) {
  static const char *const names[] = {"param", "grad", "mom", "lr", "scale"};
  return step_op(cx, 3, names);
}

/* ---- tables for text and video diffusion ---- */

static bool int_in(IrShapeCtx *cx, IrAttrId id, int64_t lo, int64_t hi, const char *what) {
  int64_t v = attr(cx, id)->i;
  if (v < lo || v > hi)
    return ir_shape_fail(cx, -1, "%s must be in [%lld, %lld], got %lld", what, (long long)lo,
                         (long long)hi, (long long)v);
  return true;
}

/* rel_buckets() {len, buckets, max_distance} -> i32[len, len] */
bool ir_shape_REL_BUCKETS(IrShapeCtx *cx) {
  if (!int_in(cx, IR_ATTR_LEN, 1, 1 << 20, "len") ||
      !int_in(cx, IR_ATTR_BUCKETS, 4, 1 << 16, "buckets"))
    return false;
  if (attr(cx, IR_ATTR_BUCKETS)->i % 4)
    return ir_shape_fail(cx, -1, "buckets must be a multiple of 4, got %lld",
                         (long long)attr(cx, IR_ATTR_BUCKETS)->i);
  if (!int_in(cx, IR_ATTR_MAX_DISTANCE, attr(cx, IR_ATTR_BUCKETS)->i / 4 + 1, 1 << 20,
              "max_distance"))
    return false;
  IrShape s = {.rank = 2, .d = {attr(cx, IR_ATTR_LEN)->i, attr(cx, IR_ATTR_LEN)->i}};
  set_out(cx, IR_I32, &s);
  return true;
}

/* timestep_embedding(t f32[...]) {dim, theta} -> f32[..., dim] */
bool ir_shape_TIMESTEP_EMBEDDING(IrShapeCtx *cx) {
  if (!need_float(cx, 0)) return false;
  if (rank(cx, 0) >= IR_MAX_RANK) return ir_shape_fail(cx, 0, "t has too many dims");
  if (!int_in(cx, IR_ATTR_DIM, 2, 1 << 20, "dim")) return false;
  if (attr(cx, IR_ATTR_DIM)->i % 2)
    return ir_shape_fail(cx, -1, "dim must be even, got %lld", (long long)attr(cx, IR_ATTR_DIM)->i);
  double th = attr(cx, IR_ATTR_THETA)->f;
  if (!(th > 1) || th > 1e300)
    return ir_shape_fail(cx, -1, "theta must be a finite number above 1, got %g", th);
  IrShape s = *in_shape(cx, 0);
  s.d[s.rank++] = attr(cx, IR_ATTR_DIM)->i;
  set_out(cx, IR_F32, &s);
  return true;
}

/* ddpm_table() {steps, beta_start, beta_end, zero_snr, gamma} -> f32[steps, 3] */
bool ir_shape_DDPM_TABLE(IrShapeCtx *cx) {
  if (!int_in(cx, IR_ATTR_STEPS, 2, 1 << 20, "steps") ||
      !int_in(cx, IR_ATTR_ZERO_SNR, 0, 1, "zero_snr"))
    return false;
  double b0 = attr(cx, IR_ATTR_BETA_START)->f, b1 = attr(cx, IR_ATTR_BETA_END)->f,
         g = attr(cx, IR_ATTR_GAMMA)->f;
  if (!(b0 > 0 && b0 <= b1 && b1 < 1))
    return ir_shape_fail(cx, -1, "betas need 0 < beta_start <= beta_end < 1, got %g and %g", b0,
                         b1);
  if (!(g > 0) || g > 1e300)
    return ir_shape_fail(cx, -1, "gamma must be a finite number above 0, got %g", g);
  IrShape s = {.rank = 2, .d = {attr(cx, IR_ATTR_STEPS)->i, 3}};
  set_out(cx, IR_F32, &s);
  return true;
}
