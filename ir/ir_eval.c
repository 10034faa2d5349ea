/* The reference interpreter (ir_eval.h): one naive loop nest per op, in
 * double. Shapes were checked by the shape rules when the nodes were built,
 * so the kernels trust them; only data (ids, labels) is checked. */
#include "ir_eval.h"

#include "ir_fused.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ---- the store ---- */

void ir_store_init(IrTensorStore *st) {
  memset(st, 0, sizeof *st);
  arena_init(&st->arena);
  ir_map_init(&st->map, &st->arena, false);
}

void ir_store_free(IrTensorStore *st) {
  for (int i = 0; i < st->map.cap; i++)
    if (st->map.slots[i].key) free(((IrTensor *)st->map.slots[i].p)->d);
  arena_free(&st->arena);
}

IrTensor *ir_store_get(const IrTensorStore *st, const IrValue *v) {
  IrMapSlot *s = ir_map_get(&st->map, v);
  return s ? s->p : NULL;
}

static IrTensor *put_shape(IrTensorStore *st, const IrValue *v, IrDType dt, const IrShape *shape) {
  IrMapSlot *s = ir_map_put(&st->map, v);
  IrTensor *t = s->p;
  int64_t n = ir_numel(shape);
  if (!t) {
    t = ARENA_NEW(&st->arena, IrTensor);
    s->p = t;
  }
  if (!t->d || t->n != n) {
    free(t->d);
    t->d = calloc((size_t)(n ? n : 1), sizeof(double));
    if (!t->d) mm_die(__FILE__, __LINE__, "out of memory");
  } else if (!ir_shape_eq(&t->shape, shape)) {
    memset(t->d, 0, sizeof(double) * (size_t)n);
  }
  t->dtype = dt;
  t->shape = *shape;
  t->n = n;
  return t;
}

IrTensor *ir_store_put(IrTensorStore *st, const IrValue *v) {
  return put_shape(st, v, v->dtype, &v->shape);
}

/* splitmix64 */
static uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

double ir_eval_uniform(uint64_t seed, uint64_t stream, uint64_t i) {
  uint64_t h = mix(mix(mix(seed) ^ stream) ^ i);
  return (double)(h >> 11) * (1.0 / 9007199254740992.0);
}

void ir_store_init_params(IrTensorStore *st, const IrModule *m, uint64_t seed) {
  for (int k = 0; k < m->params.len; k++) {
    const IrValue *p = m->params.items[k];
    IrTensor *t = ir_store_put(st, p);
    const IrInit *in = &p->init;
    int64_t fan_in = p->shape.rank ? t->n / p->shape.d[0] : 1;
    for (int64_t i = 0; i < t->n; i++) {
      double u = ir_eval_uniform(seed, (uint64_t)k, (uint64_t)i), x = 0;
      switch (in->kind) {
        case IR_INIT_NONE:
        case IR_INIT_ZEROS: x = 0; break;
        case IR_INIT_ONES: x = 1; break;
        case IR_INIT_FILL: x = in->a; break;
        case IR_INIT_NORMAL: { /* Box-Muller on two hashes */
          double u2 = ir_eval_uniform(seed ^ 0x5bd1e995u, (uint64_t)k, (uint64_t)i);
          x = in->a * sqrt(-2 * log(1 - u)) * cos(2 * M_PI * u2);
          break;
        }
        case IR_INIT_UNIFORM: x = in->a + (in->b - in->a) * u; break;
        case IR_INIT_FAN_IN: {
          double b = in->a / sqrt((double)(fan_in ? fan_in : 1));
          x = -b + 2 * b * u;
          break;
        }
      }
      t->d[i] = x;
    }
  }
}

/* ---- helpers ---- */

typedef struct Ev {
  const IrModule *m;
  const IrNode *n;
  IrTensorStore *st;
  char *err;
  size_t errlen;
} Ev;

static bool fail(Ev *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool fail(Ev *e, const char *fmt, ...) {
  int k = snprintf(e->err, e->errlen, "%s: ", ir_ops[e->n->op].name);
  if (k < 0 || (size_t)k >= e->errlen) return false;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->err + k, e->errlen - (size_t)k, fmt, ap);
  va_end(ap);
  return false;
}

static const IrTensor *IN(Ev *e, int i) {
  return ir_store_get(e->st, e->n->in[i]);
}
static IrTensor *OUT(Ev *e, int j) {
  return ir_store_put(e->st, e->n->out[j]);
}
static double fattr(Ev *e, IrAttrId id) {
  return e->n->attrs.v[id].f;
}
static int64_t iattr(Ev *e, IrAttrId id) {
  return e->n->attrs.v[id].i;
}
static bool has(Ev *e, IrAttrId id) {
  return ir_attrs_has(&e->n->attrs, id);
}
static const IrAttrVal *attr(Ev *e, IrAttrId id) {
  return &e->n->attrs.v[id];
}

/* index into `in` of the element at coord (of an out-shaped iteration),
 * numpy broadcasting (trailing alignment, size-1 dims repeat) */
static int64_t bidx(const IrShape *out, const int64_t *coord, const IrShape *in) {
  int64_t idx = 0;
  for (int i = 0; i < in->rank; i++) {
    int k = out->rank - in->rank + i;
    idx = idx * in->d[i] + (in->d[i] == 1 ? 0 : coord[k]);
  }
  return idx;
}

static void unravel(const IrShape *s, int64_t flat, int64_t *coord) {
  for (int i = s->rank - 1; i >= 0; i--) {
    coord[i] = flat % s->d[i];
    flat /= s->d[i];
  }
}

static int64_t last(const IrShape *s) {
  return s->rank ? s->d[s->rank - 1] : 1;
}

/* outer, n, inner of a split at `axis` */
static void split_axis(const IrShape *s, int axis, int64_t *outer, int64_t *n, int64_t *inner) {
  *outer = *inner = 1;
  for (int i = 0; i < axis; i++) *outer *= s->d[i];
  *n = s->d[axis];
  for (int i = axis + 1; i < s->rank; i++) *inner *= s->d[i];
}

static double sigm(double x) {
  return 1 / (1 + exp(-x));
}
static const double GELU_C = 0.7978845608028654; /* sqrt(2 / pi) */

static double act_fwd(IrOp op, double x) {
  switch (op) {
    case IR_OP_NEG: return -x;
    case IR_OP_EXP: return exp(x);
    case IR_OP_LOG: return log(x);
    case IR_OP_SQRT: return sqrt(x);
    case IR_OP_RSQRT: return 1 / sqrt(x);
    case IR_OP_TANH: return tanh(x);
    case IR_OP_SIGMOID: return sigm(x);
    case IR_OP_RELU: return x > 0 ? x : 0;
    case IR_OP_ABS: return fabs(x);
    case IR_OP_GELU: return 0.5 * x * (1 + erf(x / M_SQRT2));
    case IR_OP_GELU_TANH: return 0.5 * x * (1 + tanh(GELU_C * (x + 0.044715 * x * x * x)));
    case IR_OP_SILU: return x * sigm(x);
    default: return NAN;
  }
}

/* act'(x) */
static double act_bwd(IrOp op, double x) {
  switch (op) {
    case IR_OP_GELU_GRAD:
      return 0.5 * (1 + erf(x / M_SQRT2)) + x * exp(-0.5 * x * x) / sqrt(2 * M_PI);
    case IR_OP_GELU_TANH_GRAD: {
      double t = tanh(GELU_C * (x + 0.044715 * x * x * x));
      return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * GELU_C * (1 + 3 * 0.044715 * x * x);
    }
    case IR_OP_SILU_GRAD: {
      double s = sigm(x);
      return s * (1 + x * (1 - s));
    }
    case IR_OP_RELU_GRAD: return x > 0 ? 1 : 0;
    case IR_OP_ABS_GRAD: return x > 0 ? 1 : x < 0 ? -1 : 0;
    case IR_OP_SIGMOID_GRAD: {
      double s = sigm(x);
      return s * (1 - s);
    }
    case IR_OP_TANH_GRAD: {
      double t = tanh(x);
      return 1 - t * t;
    }
    default: return NAN;
  }
}

/* to an integer dtype: truncation (bool: != 0, u8: modulo 256) */
static double to_dtype(IrDType t, double x) {
  if (ir_dtype_is_float(t)) return x;
  if (t == IR_BOOL) return x != 0;
  double r = trunc(x);
  if (t == IR_U8) r = fmod(fmod(r, 256) + 256, 256);
  return r;
}

/* ---- op groups ---- */

static bool ev_binary(Ev *e) {
  const IrTensor *a = IN(e, 0), *b = IN(e, 1);
  IrTensor *y = OUT(e, 0);
  int64_t c[IR_MAX_RANK];
  IrOp op = e->n->op;
  bool integral = !ir_dtype_is_float(y->dtype);
  for (int64_t i = 0; i < y->n; i++) {
    unravel(&y->shape, i, c);
    double u = a->d[bidx(&y->shape, c, &a->shape)], v = b->d[bidx(&y->shape, c, &b->shape)], r;
    switch (op) {
      case IR_OP_ADD: r = u + v; break;
      case IR_OP_SUB: r = u - v; break;
      case IR_OP_MUL: r = u * v; break;
      case IR_OP_DIV:
        if (integral && v == 0) return fail(e, "integer division by zero");
        r = integral ? trunc(u / v) : u / v;
        break;
      default: r = pow(u, v); break;
    }
    y->d[i] = to_dtype(y->dtype, r);
  }
  return true;
}

static bool ev_unary(Ev *e) {
  const IrTensor *x = IN(e, 0);
  IrTensor *y = OUT(e, 0);
  IrOp op = e->n->op;
  for (int64_t i = 0; i < y->n; i++) {
    double v = x->d[i];
    switch (op) {
      case IR_OP_ADD_SCALAR: v += fattr(e, IR_ATTR_VALUE); break;
      case IR_OP_MUL_SCALAR: v *= fattr(e, IR_ATTR_VALUE); break;
      case IR_OP_POW_SCALAR: v = pow(v, fattr(e, IR_ATTR_VALUE)); break;
      case IR_OP_CAST:
      case IR_OP_DETACH: break;
      case IR_OP_DROPOUT: {
        double p = fattr(e, IR_ATTR_P);
        int64_t seed = has(e, IR_ATTR_SEED) ? iattr(e, IR_ATTR_SEED) : 0;
        if (p > 0) {
          double u = e->st->uniform ? e->st->uniform(e->st->user, seed, e->st->step, (uint64_t)i)
                                    : ir_eval_uniform((uint64_t)seed, e->st->step, (uint64_t)i);
          v = u >= p ? v / (1 - p) : 0;
        }
        break;
      }
      default: v = act_fwd(op, v); break;
    }
    y->d[i] = to_dtype(y->dtype, v);
  }
  return true;
}

static bool ev_act_grad(Ev *e) {
  const IrTensor *dy = IN(e, 0), *x = IN(e, 1);
  IrTensor *dx = OUT(e, 0);
  for (int64_t i = 0; i < dx->n; i++) dx->d[i] = dy->d[i] * act_bwd(e->n->op, x->d[i]);
  return true;
}

static bool ev_full(Ev *e) {
  IrTensor *y = OUT(e, 0);
  double v = to_dtype(y->dtype, fattr(e, IR_ATTR_VALUE));
  for (int64_t i = 0; i < y->n; i++) y->d[i] = v;
  return true;
}

/* randn: Box-Muller on two of the built-in hashes per element (the
 * interpreter's own stream, not the trainers' Philox: see ops.def) */
static bool ev_randn(Ev *e) {
  IrTensor *y = OUT(e, 0);
  uint64_t site = has(e, IR_ATTR_SEED) ? (uint64_t)iattr(e, IR_ATTR_SEED) : 0;
  uint64_t stream = (site << 32) ^ e->st->step;
  for (int64_t i = 0; i < y->n; i++) {
    double u1 = ir_eval_uniform(0x72616e646eull, stream, (uint64_t)i);
    double u2 = ir_eval_uniform(0x72616e646eull ^ 0x5bd1e995u, stream, (uint64_t)i);
    y->d[i] = to_dtype(y->dtype, sqrt(-2 * log(1 - u1)) * cos(2 * M_PI * u2));
  }
  return true;
}

/* ---- contractions ---- */

static bool ev_matmul(Ev *e) {
  const IrTensor *a = IN(e, 0), *b = IN(e, 1);
  IrTensor *y = OUT(e, 0);
  int r = y->shape.rank;
  int64_t M = y->shape.d[r - 2], N = y->shape.d[r - 1], K = last(&a->shape);
  IrShape batch = y->shape, ab = a->shape, bb = b->shape;
  batch.rank -= 2, ab.rank -= 2, bb.rank -= 2;
  int64_t nb = ir_numel(&batch), c[IR_MAX_RANK];
  for (int64_t z = 0; z < nb; z++) {
    unravel(&batch, z, c);
    const double *A = a->d + bidx(&batch, c, &ab) * M * K, *B = b->d + bidx(&batch, c, &bb) * K * N;
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++) {
        double s = 0;
        for (int64_t k = 0; k < K; k++) s += A[i * K + k] * B[k * N + j];
        y->d[(z * M + i) * N + j] = s;
      }
  }
  return true;
}

/* LINEAR: y[r, n] = x[r, :] . w[n, :]; GRAD_X: dx[r, k] = dy[r, :] . w[:, k];
 * GRAD_W: dw[n, k] = dy[:, n] . x[:, k] */
static bool ev_linear(Ev *e) {
  const IrTensor *a = IN(e, 0), *b = IN(e, 1);
  IrTensor *y = OUT(e, 0);
  IrOp op = e->n->op;
  if (op == IR_OP_LINEAR || op == IR_OP_LINEAR_GRAD_X) {
    int64_t K = last(&a->shape), N = last(&y->shape), rows = y->n / N;
    for (int64_t r = 0; r < rows; r++)
      for (int64_t n = 0; n < N; n++) {
        double s = 0;
        for (int64_t k = 0; k < K; k++)
          s += a->d[r * K + k] * (op == IR_OP_LINEAR ? b->d[n * K + k] : b->d[k * N + n]);
        y->d[r * N + n] = s;
      }
  } else {
    int64_t N = last(&a->shape), K = last(&b->shape), rows = a->n / N;
    for (int64_t n = 0; n < N; n++)
      for (int64_t k = 0; k < K; k++) {
        double s = 0;
        for (int64_t r = 0; r < rows; r++) s += a->d[r * N + n] * b->d[r * K + k];
        y->d[n * K + k] = s;
      }
  }
  return true;
}

/* Convolution geometry as 3-D (a 2-D conv has depth 1). */
typedef struct Conv {
  int64_t B, C, O, in[3], k[3], out[3], s[3], p[3];
} Conv;

static void conv_geom(Ev *e, const IrShape *x, const IrShape *w, const IrShape *y, Conv *g) {
  int nsp = x->rank - 2, off = 3 - nsp;
  g->B = x->d[0], g->C = x->d[1], g->O = w->d[0];
  for (int i = 0; i < 3; i++) g->in[i] = g->k[i] = g->out[i] = g->s[i] = 1, g->p[i] = 0;
  for (int i = 0; i < nsp; i++) {
    g->in[off + i] = x->d[2 + i];
    g->k[off + i] = w->d[2 + i];
    g->out[off + i] = y->d[2 + i];
    g->s[off + i] = attr(e, IR_ATTR_STRIDE)->ints[i];
    g->p[off + i] = attr(e, IR_ATTR_PADDING)->ints[i];
  }
}

/* Visits every (output position, kernel tap) pair whose input is inside:
 * mode 0: y += x * w (+ bias); 1: dx += dy * w; 2: dw += dy * x. */
static void conv_loop(const Conv *g, int mode, double *y, double *x, double *w) {
  int64_t kv = g->k[0] * g->k[1] * g->k[2], iv = g->in[0] * g->in[1] * g->in[2],
          ov = g->out[0] * g->out[1] * g->out[2];
  for (int64_t b = 0; b < g->B; b++)
    for (int64_t o = 0; o < g->O; o++)
      for (int64_t od = 0; od < g->out[0]; od++)
        for (int64_t oh = 0; oh < g->out[1]; oh++)
          for (int64_t ow = 0; ow < g->out[2]; ow++) {
            double *yy = &y[(b * g->O + o) * ov + (od * g->out[1] + oh) * g->out[2] + ow];
            for (int64_t c = 0; c < g->C; c++)
              for (int64_t kd = 0; kd < g->k[0]; kd++)
                for (int64_t kh = 0; kh < g->k[1]; kh++)
                  for (int64_t kw = 0; kw < g->k[2]; kw++) {
                    int64_t id = od * g->s[0] - g->p[0] + kd, ih = oh * g->s[1] - g->p[1] + kh,
                            iw = ow * g->s[2] - g->p[2] + kw;
                    if (id < 0 || id >= g->in[0] || ih < 0 || ih >= g->in[1] || iw < 0 ||
                        iw >= g->in[2])
                      continue;
                    double *xx = &x[(b * g->C + c) * iv + (id * g->in[1] + ih) * g->in[2] + iw];
                    double *ww = &w[(o * g->C + c) * kv + (kd * g->k[1] + kh) * g->k[2] + kw];
                    if (mode == 0)
                      *yy += *xx * *ww;
                    else if (mode == 1)
                      *xx += *yy * *ww;
                    else
                      *ww += *yy * *xx;
                  }
          }
}

static bool ev_conv(Ev *e) {
  IrOp op = e->n->op;
  Conv g;
  IrTensor *r = OUT(e, 0);
  memset(r->d, 0, sizeof(double) * (size_t)r->n);
  if (op == IR_OP_CONV2D || op == IR_OP_CONV3D) {
    const IrTensor *x = IN(e, 0), *w = IN(e, 1);
    conv_geom(e, &x->shape, &w->shape, &r->shape, &g);
    conv_loop(&g, 0, r->d, x->d, w->d);
    if (e->n->nin == 3) {
      const IrTensor *bias = IN(e, 2);
      int64_t per = r->n / (g.B * g.O);
      for (int64_t i = 0; i < r->n; i++) r->d[i] += bias->d[(i / per) % g.O];
    }
  } else if (op == IR_OP_CONV2D_GRAD_X || op == IR_OP_CONV3D_GRAD_X) {
    const IrTensor *dy = IN(e, 0), *w = IN(e, 1);
    conv_geom(e, &r->shape, &w->shape, &dy->shape, &g);
    conv_loop(&g, 1, dy->d, r->d, w->d);
  } else {
    const IrTensor *dy = IN(e, 0), *x = IN(e, 1);
    conv_geom(e, &x->shape, &r->shape, &dy->shape, &g);
    conv_loop(&g, 2, dy->d, x->d, r->d);
  }
  return true;
}

/* ---- normalisation ---- */

/* One normalised group of n elements at x + off with element stride 1,
 * channel of element i = ch(i). Forward: y, and its mean and rstd. */
/* A norm's rows: per row n values of x; over the last dim C, or (with the
 * groups attribute) per sample and group of C / G channels times the S
 * positions of the spatial dims. */
typedef struct NormRows {
  int64_t rows, n, C, S, G;
  int64_t inner; /* layer_norm {axis}: the product of the dims after it */
} NormRows;
/* element i of row r: rows of n, or (layer_norm {axis}) row r = o * inner
 * + j of x laid out (outer, C, inner) */
static int64_t norm_at(const NormRows *g, int64_t r, int64_t i) {
  return g->inner == 1 ? r * g->n + i : ((r / g->inner) * g->n + i) * g->inner + r % g->inner;
}
static NormRows norm_rows(Ev *e, const IrTensor *x) {
  NormRows g = {.S = 1, .G = 1, .inner = 1};
  if (ir_attrs_has(&e->n->attrs, IR_ATTR_GROUPS)) {
    g.G = iattr(e, IR_ATTR_GROUPS);
    g.C = x->shape.d[1];
    g.S = x->n / (x->shape.d[0] * g.C);
    g.rows = x->shape.d[0] * g.G;
    g.n = g.C / g.G * g.S;
  } else {
    int cd = ir_norm_dim(&e->n->attrs, &x->shape);
    g.C = x->shape.d[cd];
    for (int d = cd + 1; d < x->shape.rank; d++) g.inner *= x->shape.d[d];
    g.rows = x->n / g.C;
    g.n = g.C;
  }
  return g;
}

static bool ev_norm(Ev *e) {
  IrOp op = e->n->op;
  const IrTensor *x = IN(e, 0), *w = e->n->nin > 1 ? IN(e, 1) : NULL,
                 *b = e->n->nin > 2 ? IN(e, 2) : NULL;
  IrTensor *y = OUT(e, 0), *mean = op == IR_OP_RMS_NORM ? NULL : OUT(e, 1),
           *rstd = OUT(e, op == IR_OP_RMS_NORM ? 1 : 2);
  double eps = fattr(e, IR_ATTR_EPS);
  NormRows nr = norm_rows(e, x);
  int64_t rows = nr.rows, n = nr.n, C = nr.C, S = nr.S, G = nr.G;
  for (int64_t r = 0; r < rows; r++) {
#define xr(i) x->d[norm_at(&nr, r, i)]
    double mu = 0, var = 0;
    for (int64_t i = 0; i < n; i++) mu += xr(i);
    mu /= (double)n;
    for (int64_t i = 0; i < n; i++)
      var += op == IR_OP_RMS_NORM ? xr(i) * xr(i) : (xr(i) - mu) * (xr(i) - mu);
    double rs = 1 / sqrt(var / (double)n + eps);
    if (op == IR_OP_RMS_NORM) mu = 0;
    if (mean) mean->d[r] = mu;
    rstd->d[r] = rs;
    for (int64_t i = 0; i < n; i++) {
      int64_t c = (r % G) * (C / G) + i / S; /* i without groups */
      double v = (xr(i) - mu) * rs;
      if (w) v *= w->d[c];
      if (b) v += b->d[c];
      y->d[norm_at(&nr, r, i)] = v;
    }
#undef xr
  }
  return true;
}

/* (dy, x, [mean,] rstd, w?) -> dx, dw, (db) */
static bool ev_norm_grad(Ev *e) {
  IrOp op = e->n->op;
  bool rms = op == IR_OP_RMS_NORM_GRAD;
  int nst = rms ? 1 : 2;
  const IrTensor *dy = IN(e, 0), *x = IN(e, 1), *mean = rms ? NULL : IN(e, 2),
                 *rstd = IN(e, 1 + nst);
  const IrTensor *w = e->n->nin > 2 + nst ? IN(e, 2 + nst) : NULL;
  IrTensor *dx = OUT(e, 0), *dw = OUT(e, 1), *db = rms ? NULL : OUT(e, 2);
  memset(dw->d, 0, sizeof(double) * (size_t)dw->n);
  if (db) memset(db->d, 0, sizeof(double) * (size_t)db->n);
  NormRows nr = norm_rows(e, x);
  int64_t rows = nr.rows, n = nr.n, C = nr.C, S = nr.S, G = nr.G;
  for (int64_t r = 0; r < rows; r++) {
#define xr(i) x->d[norm_at(&nr, r, i)]
#define gr(i) dy->d[norm_at(&nr, r, i)]
    double mu = mean ? mean->d[r] : 0, rs = rstd->d[r], mg = 0, mgx = 0;
    for (int64_t i = 0; i < n; i++) {
      int64_t c = (r % G) * (C / G) + i / S; /* i without groups */
      double g = gr(i) * (w ? w->d[c] : 1), xh = (xr(i) - mu) * rs;
      mg += g;
      mgx += rms ? g * xr(i) : g * xh;
      dw->d[c] += gr(i) * xh;
      if (db) db->d[c] += gr(i);
    }
    mg /= (double)n;
    mgx /= (double)n;
    for (int64_t i = 0; i < n; i++) {
      int64_t c = (r % G) * (C / G) + i / S; /* i without groups */
      double g = gr(i) * (w ? w->d[c] : 1), xh = (xr(i) - mu) * rs;
      dx->d[norm_at(&nr, r, i)] =
          rms ? rs * g - xr(i) * rs * rs * rs * mgx : rs * (g - mg - xh * mgx);
    }
#undef xr
#undef gr
  }
  return true;
}

static bool ev_softmax(Ev *e) {
  IrOp op = e->n->op;
  const IrTensor *x = IN(e, 0);
  IrTensor *y = OUT(e, 0);
  int64_t outer, n, inner;
  split_axis(&x->shape, (int)iattr(e, IR_ATTR_AXIS), &outer, &n, &inner);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t in = 0; in < inner; in++) {
      const double *xr = x->d + o * n * inner + in;
      double *yr = y->d + o * n * inner + in;
      if (op == IR_OP_SOFTMAX || op == IR_OP_LOG_SOFTMAX) {
        double mx = -INFINITY, s = 0;
        for (int64_t i = 0; i < n; i++) mx = fmax(mx, xr[i * inner]);
        for (int64_t i = 0; i < n; i++) s += exp(xr[i * inner] - mx);
        for (int64_t i = 0; i < n; i++)
          yr[i * inner] =
              op == IR_OP_SOFTMAX ? exp(xr[i * inner] - mx) / s : xr[i * inner] - mx - log(s);
      } else { /* (dy, y) */
        const double *yv = IN(e, 1)->d + o * n * inner + in;
        double s = 0;
        for (int64_t i = 0; i < n; i++)
          s += op == IR_OP_SOFTMAX_GRAD ? xr[i * inner] * yv[i * inner] : xr[i * inner];
        for (int64_t i = 0; i < n; i++)
          yr[i * inner] = op == IR_OP_SOFTMAX_GRAD ? yv[i * inner] * (xr[i * inner] - s)
                                                   : xr[i * inner] - exp(yv[i * inner]) * s;
      }
    }
  return true;
}

/* ---- reductions and layout ---- */

/* SUM, MEAN, SUM_TO: every input element adds into its output element */
static bool ev_reduce(Ev *e) {
  IrOp op = e->n->op;
  const IrTensor *x = IN(e, 0);
  IrTensor *y = OUT(e, 0);
  memset(y->d, 0, sizeof(double) * (size_t)y->n);
  bool red[IR_MAX_RANK] = {0};
  int64_t c[IR_MAX_RANK], cnt = 1;
  if (op != IR_OP_SUM_TO) {
    const IrAttrVal *ax = attr(e, IR_ATTR_AXES);
    for (int i = 0; i < ax->nints; i++) red[ax->ints[i]] = true, cnt *= x->shape.d[ax->ints[i]];
  }
  for (int64_t i = 0; i < x->n; i++) {
    unravel(&x->shape, i, c);
    int64_t idx = 0;
    if (op == IR_OP_SUM_TO) {
      idx = bidx(&x->shape, c, &y->shape);
    } else {
      for (int k = 0; k < x->shape.rank; k++)
        if (!red[k]) idx = idx * x->shape.d[k] + c[k];
    }
    y->d[idx] += x->d[i];
  }
  if (op == IR_OP_MEAN)
    for (int64_t i = 0; i < y->n; i++) y->d[i] /= (double)cnt;
  return true;
}

static bool ev_layout(Ev *e) {
  IrOp op = e->n->op;
  const IrTensor *x = IN(e, 0);
  IrTensor *y = OUT(e, 0);
  int64_t c[IR_MAX_RANK];
  if (op == IR_OP_RESHAPE) {
    memcpy(y->d, x->d, sizeof(double) * (size_t)x->n);
  } else if (op == IR_OP_TRANSPOSE) {
    const IrAttrVal *p = attr(e, IR_ATTR_PERM);
    int64_t xc[IR_MAX_RANK];
    for (int64_t i = 0; i < y->n; i++) {
      unravel(&y->shape, i, c);
      for (int k = 0; k < y->shape.rank; k++) xc[p->ints[k]] = c[k];
      int64_t idx = 0;
      for (int k = 0; k < x->shape.rank; k++) idx = idx * x->shape.d[k] + xc[k];
      y->d[i] = x->d[idx];
    }
  } else if (op == IR_OP_EXPAND) {
    for (int64_t i = 0; i < y->n; i++) {
      unravel(&y->shape, i, c);
      y->d[i] = x->d[bidx(&y->shape, c, &x->shape)];
    }
  } else { /* SLICE, PAD_SLICE: y[.., start + i * step, ..] <-> x[.., i, ..] */
    int ax = (int)iattr(e, IR_ATTR_AXIS);
    int64_t start = iattr(e, IR_ATTR_START),
            step = has(e, IR_ATTR_STEP) ? iattr(e, IR_ATTR_STEP) : 1;
    const IrShape *small = op == IR_OP_SLICE ? &y->shape : &x->shape,
                  *big = op == IR_OP_SLICE ? &x->shape : &y->shape;
    if (op == IR_OP_PAD_SLICE) memset(y->d, 0, sizeof(double) * (size_t)y->n);
    int64_t sn = ir_numel(small);
    for (int64_t i = 0; i < sn; i++) {
      unravel(small, i, c);
      c[ax] = start + c[ax] * step;
      int64_t idx = 0;
      for (int k = 0; k < big->rank; k++) idx = idx * big->d[k] + c[k];
      if (op == IR_OP_SLICE)
        y->d[i] = x->d[idx];
      else
        y->d[idx] = x->d[i];
    }
  }
  return true;
}

static bool ev_concat(Ev *e) {
  IrTensor *y = OUT(e, 0);
  int ax = (int)iattr(e, IR_ATTR_AXIS);
  int64_t outer, n, inner, off = 0;
  split_axis(&y->shape, ax, &outer, &n, &inner);
  for (int k = 0; k < e->n->nin; k++) {
    const IrTensor *x = IN(e, k);
    int64_t xn = x->shape.d[ax];
    for (int64_t o = 0; o < outer; o++)
      memcpy(y->d + (o * n + off) * inner, x->d + o * xn * inner,
             sizeof(double) * (size_t)(xn * inner));
    off += xn;
  }
  return true;
}

/* ---- transformer pieces ---- */

static bool ev_embedding(Ev *e) {
  bool grad = e->n->op == IR_OP_EMBEDDING_GRAD;
  const IrTensor *ids = IN(e, grad ? 1 : 0), *src = IN(e, grad ? 0 : 1);
  IrTensor *y = OUT(e, 0);
  const IrShape *table = grad ? &y->shape : &src->shape;
  int64_t V = table->d[0], C = table->d[1];
  if (grad) memset(y->d, 0, sizeof(double) * (size_t)y->n);
  for (int64_t i = 0; i < ids->n; i++) {
    double id = ids->d[i];
    if (!(id >= 0 && id < (double)V))
      return fail(e, "id %g at position %lld is outside [0, %lld)", id, (long long)i, (long long)V);
    int64_t r = (int64_t)id;
    for (int64_t c = 0; c < C; c++) {
      if (grad)
        y->d[r * C + c] += src->d[i * C + c];
      else
        y->d[i * C + c] = src->d[r * C + c];
    }
  }
  return true;
}

/* rotate-half RoPE on x[B, T, H, D]; the gradient rotates back */
static bool ev_rope(Ev *e) {
  const IrTensor *x = IN(e, 0);
  IrTensor *y = OUT(e, 0);
  double theta = fattr(e, IR_ATTR_THETA), sgn = e->n->op == IR_OP_ROPE ? 1 : -1;
  int64_t off0 = has(e, IR_ATTR_OFFSET) ? iattr(e, IR_ATTR_OFFSET) : 0;
  const IrTensor *pos = e->n->nin > 1 ? IN(e, 1) : NULL;
  const IrShape *s = &x->shape;
  int64_t T = s->d[1], H = s->d[2], D = s->d[3], h2 = D / 2;
  for (int64_t b = 0; b < s->d[0]; b++)
    for (int64_t t = 0; t < T; t++)
      for (int64_t h = 0; h < H; h++) {
        int64_t off = off0 + (pos ? (int64_t)pos->d[b] : 0);
        const double *xr = x->d + ((b * T + t) * H + h) * D;
        double *yr = y->d + ((b * T + t) * H + h) * D;
        for (int64_t i = 0; i < h2; i++) {
          double a = (double)(off + t) * pow(theta, -2.0 * (double)i / (double)D), co = cos(a),
                 si = sgn * sin(a);
          double x0 = xr[i], x1 = xr[i + h2];
          yr[i] = x0 * co - x1 * si;
          yr[i + h2] = x1 * co + x0 * si;
        }
      }
  return true;
}

/* haar2d / haar3d and their inverses, the definition itself: coefficient
 * k of a block is sum over the block's positions p of sign(k, p) x[p] / sqrt(S),
 * sign -1 when an odd number of the axes where k differs has p at the
 * block's second element (2D k: bit 0 rows, bit 1 columns; 3D k: bit 0
 * columns, bit 1 rows, bit 2 frames); the inverse sums the same signs over k. */
static bool ev_haar(Ev *e) {
  IrOp op = e->n->op;
  bool three = op == IR_OP_HAAR3D || op == IR_OP_IHAAR3D;
  bool inv = op == IR_OP_IHAAR2D || op == IR_OP_IHAAR3D;
  const IrTensor *in = IN(e, 0);
  IrTensor *out = OUT(e, 0);
  const IrShape *full = inv ? &out->shape : &in->shape; /* the [B, C, (T,) H, W] side */
  int64_t B = full->d[0], C = full->d[1], T = three ? full->d[2] : 1, H = full->d[three ? 3 : 2],
          W = full->d[three ? 4 : 3], S = three ? 8 : 4;
  double scale = 1 / sqrt((double)S);
  memset(out->d, 0, sizeof(double) * (size_t)out->n);
  for (int64_t b = 0; b < B; b++)
    for (int64_t c = 0; c < C; c++)
      for (int64_t k = 0; k < S; k++)
        for (int64_t t = 0; t < T; t++)
          for (int64_t h = 0; h < H; h++)
            for (int64_t w = 0; w < W; w++) {
              int64_t kt = three ? k >> 2 & 1 : 0, kh = three ? k >> 1 & 1 : k & 1,
                      kw = three ? k & 1 : k >> 1 & 1;
              int64_t odd = (kt & (three ? t % 2 : 0)) + (kh & (h % 2)) + (kw & (w % 2));
              double sg = odd % 2 ? -scale : scale;
              int64_t T2 = three ? T / 2 : 1, tc = three ? t / 2 : 0;
              int64_t xi = (((b * C + c) * T + t) * H + h) * W + w;
              int64_t yi =
                  (((b * C * S + c * S + k) * T2 + tc) * (H / 2) + h / 2) * (W / 2) + w / 2;
              if (inv)
                out->d[xi] += sg * in->d[yi];
              else
                out->d[yi] += sg * in->d[xi];
            }
  return true;
}

/* place(x, src, ids) {token} and place_grad(dy, ids) {token, size}: the
 * rows where ids == token, in order, are src's (dsrc's) rows */
static bool ev_place(Ev *e) {
  bool grad = e->n->op == IR_OP_PLACE_GRAD;
  const IrTensor *x = IN(e, 0), *ids = IN(e, grad ? 1 : 2), *src = grad ? NULL : IN(e, 1);
  IrTensor *y = OUT(e, 0), *dsrc = grad ? OUT(e, 1) : NULL;
  int64_t B = x->shape.d[0], T = x->shape.d[1], C = x->shape.d[2];
  int64_t N = grad ? iattr(e, IR_ATTR_SIZE) : src->shape.d[1], tok = iattr(e, IR_ATTR_TOKEN);
  if (ir_attrs_has(&e->n->attrs, IR_ATTR_FLAT) && e->n->attrs.v[IR_ATTR_FLAT].i)
    T *= B, N *= B, B = 1; /* one pool: the batch as one row */
  memcpy(y->d, x->d, sizeof(double) * (size_t)x->n);
  for (int64_t b = 0; b < B; b++) {
    int64_t j = 0;
    for (int64_t t = 0; t < T; t++) {
      if ((int64_t)ids->d[b * T + t] != tok) continue;
      if (j == N) break;
      double *yr = y->d + (b * T + t) * C;
      for (int64_t c = 0; c < C; c++) {
        if (grad)
          dsrc->d[(b * N + j) * C + c] = yr[c], yr[c] = 0;
        else
          yr[c] = src->d[(b * N + j) * C + c];
      }
      j++;
    }
    if (grad)
      for (int64_t r = j * C; r < N * C; r++) dsrc->d[b * N * C + r] = 0;
    int64_t cnt = 0;
    for (int64_t t = 0; t < T; t++) cnt += (int64_t)ids->d[b * T + t] == tok;
    if (cnt > N)
      return fail(e, "row %lld holds token %lld %lld times, more than %lld", (long long)b,
                  (long long)tok, (long long)cnt, (long long)N);
  }
  return true;
}

/* kv_write(cache, x, pos): in place on the cache */
static bool ev_kv_write(Ev *e) {
  IrTensor *c = ir_store_get(e->st, e->n->in[0]);
  const IrTensor *x = IN(e, 1), *pos = IN(e, 2);
  int64_t B = c->shape.d[0], S = c->shape.d[1], row = c->shape.d[2] * c->shape.d[3],
          n = x->shape.d[1];
  for (int64_t b = 0; b < B; b++) {
    int64_t p = (int64_t)pos->d[b];
    if (p < 0 || p + n > S)
      return fail(e, "row %lld: positions %lld..%lld are outside the cache of %lld", (long long)b,
                  (long long)p, (long long)(p + n - 1), (long long)S);
    memcpy(c->d + (b * S + p) * row, x->d + b * n * row, sizeof(double) * (size_t)(n * row));
  }
  return true;
}

/* p[s] = scale * q . k_s for the ns keys k_s = k + s * stride (D values
 * each); returns their maximum (-inf for none). */
static double scores(double *p, const double *q, const double *k, int64_t stride, int64_t ns,
                     int64_t D, double scale) {
  double mx = -INFINITY;
  for (int64_t s = 0; s < ns; s++) {
    const double *kr = k + s * stride;
    double dot = 0;
    for (int64_t c = 0; c < D; c++) dot += q[c] * kr[c];
    p[s] = dot * scale;
    mx = fmax(mx, p[s]);
  }
  return mx;
}

/* attention_cached(q, k_cache, v_cache, pos) {scale}: query i of row b sees
 * cache positions 0 .. pos[b] + i */
static bool ev_attention_cached(Ev *e) {
  const IrTensor *q = IN(e, 0), *k = IN(e, 1), *v = IN(e, 2), *pos = IN(e, 3);
  IrTensor *out = OUT(e, 0);
  int64_t B = q->shape.d[0], n = q->shape.d[1], H = q->shape.d[2], D = q->shape.d[3],
          S = k->shape.d[1], KVH = k->shape.d[2];
  double scale = fattr(e, IR_ATTR_SCALE);
  double *p = calloc((size_t)S, sizeof(double));
  if (!p) mm_die(__FILE__, __LINE__, "out of memory");
  bool ok = true;
  for (int64_t b = 0; b < B && ok; b++)
    for (int64_t i = 0; i < n && ok; i++) {
      int64_t ns = (int64_t)pos->d[b] + i + 1;
      if (ns < 1 || ns > S) {
        ok = fail(e, "row %lld: position %lld is outside the cache of %lld", (long long)b,
                  (long long)(ns - 1), (long long)S);
        break;
      }
      for (int64_t h = 0; h < H; h++) {
        int64_t kh = h / (H / KVH);
        const double *qr = q->d + ((b * n + i) * H + h) * D;
        double mx = scores(p, qr, k->d + (b * S * KVH + kh) * D, KVH * D, ns, D, scale), sum = 0;
        for (int64_t s = 0; s < ns; s++) sum += (p[s] = exp(p[s] - mx));
        double *orow = out->d + ((b * n + i) * H + h) * D;
        for (int64_t c = 0; c < D; c++) {
          double acc = 0;
          for (int64_t s = 0; s < ns; s++) acc += p[s] * v->d[((b * S + s) * KVH + kh) * D + c];
          orow[c] = acc / sum;
        }
      }
    }
  free(p);
  return ok;
}

/* q[B, T, H, D], k[B, S, KVH, D], v[B, S, KVH, Dv]; query t sees key s when
 * (!causal or s <= t + S - T) and the key mask (if any) is not 0 at [b, s],
 * or, with segments i32[B, T] instead of the mask, seg[b, s] == seg[b, t].
 * Forward: out, lse[B, H, T]. Backward (dy, q, k, v, out, lse, mask?) -> dq,
 * dk, dv from p = exp(scale q.k - lse). */
static bool ev_attention(Ev *e) {
  bool grad = e->n->op == IR_OP_ATTENTION_GRAD;
  int o = grad ? 1 : 0;
  const IrTensor *q = IN(e, o), *k = IN(e, o + 1), *v = IN(e, o + 2);
  const IrShape *qs = &q->shape, *ks = &k->shape;
  int64_t B = qs->d[0], T = qs->d[1], H = qs->d[2], D = qs->d[3], S = ks->d[1], KVH = ks->d[2],
          Dv = v->shape.d[3];
  bool causal = iattr(e, IR_ATTR_CAUSAL);
  int mi = grad ? 6 : 3; /* the mask or segments operand */
  bool seg = e->n->nin > mi && e->n->in[mi]->dtype == IR_I32;
  double scale = fattr(e, IR_ATTR_SCALE);
  double *p = calloc(2 * (size_t)S, sizeof(double));
  if (!p) mm_die(__FILE__, __LINE__, "out of memory");
  IrTensor *out = NULL, *lse = NULL, *dq = NULL, *dk = NULL, *dv = NULL;
  const IrTensor *dy = NULL, *fo = NULL, *fl = NULL,
                 *mask = !grad && e->n->nin > 3 ? IN(e, 3) : NULL;
  if (grad) {
    dy = IN(e, 0), fo = IN(e, 4), fl = IN(e, 5);
    if (e->n->nin > 6) mask = IN(e, 6);
    dq = OUT(e, 0), dk = OUT(e, 1), dv = OUT(e, 2);
    memset(dk->d, 0, sizeof(double) * (size_t)dk->n);
    memset(dv->d, 0, sizeof(double) * (size_t)dv->n);
  } else {
    out = OUT(e, 0), lse = OUT(e, 1);
  }
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++) {
      int64_t kh = h / (H / KVH);
      for (int64_t t = 0; t < T; t++) {
        const double *qr = q->d + ((b * T + t) * H + h) * D;
        int64_t ns = causal ? t + S - T + 1 : S;
        if (ns > S) ns = S;
        double l;
        const double *mk = mask ? mask->d + b * S : NULL;
        double *drop = p + S; /* 1: key s not seen (mask 0, or another segment) */
        for (int64_t s = 0; s < ns; s++) drop[s] = mk && (seg ? mk[s] != mk[t] : mk[s] == 0);
        if (grad) {
          l = fl->d[(b * H + h) * T + t];
        } else {
          scores(p, qr, k->d + (b * S * KVH + kh) * D, KVH * D, ns, D, scale);
          double mx = -INFINITY, sum = 0;
          for (int64_t s = 0; s < ns; s++)
            if (!drop[s]) mx = fmax(mx, p[s]);
          for (int64_t s = 0; s < ns; s++)
            if (!drop[s]) sum += exp(p[s] - mx);
          l = sum > 0 ? mx + log(sum) : -INFINITY;
          lse->d[(b * H + h) * T + t] = l;
        }
        for (int64_t s = 0; s < ns; s++) { /* probabilities */
          const double *kr = k->d + ((b * S + s) * KVH + kh) * D;
          double dot = 0;
          for (int64_t i = 0; i < D; i++) dot += qr[i] * kr[i];
          p[s] = drop[s] ? 0 : exp(dot * scale - l);
        }
        if (!grad) {
          double *orow = out->d + ((b * T + t) * H + h) * Dv;
          for (int64_t i = 0; i < Dv; i++) {
            double acc = 0;
            for (int64_t s = 0; s < ns; s++) acc += p[s] * v->d[((b * S + s) * KVH + kh) * Dv + i];
            orow[i] = acc;
          }
          continue;
        }
        const double *dyr = dy->d + ((b * T + t) * H + h) * Dv,
                     *orow = fo->d + ((b * T + t) * H + h) * Dv;
        double *dqr = dq->d + ((b * T + t) * H + h) * D, delta = 0;
        for (int64_t i = 0; i < Dv; i++) delta += dyr[i] * orow[i];
        for (int64_t i = 0; i < D; i++) dqr[i] = 0;
        for (int64_t s = 0; s < ns; s++) {
          const double *vr = v->d + ((b * S + s) * KVH + kh) * Dv,
                       *kr = k->d + ((b * S + s) * KVH + kh) * D;
          double *dvr = dv->d + ((b * S + s) * KVH + kh) * Dv,
                 *dkr = dk->d + ((b * S + s) * KVH + kh) * D;
          double dp = 0;
          for (int64_t i = 0; i < Dv; i++) {
            dp += dyr[i] * vr[i];
            dvr[i] += p[s] * dyr[i];
          }
          double ds = p[s] * (dp - delta) * scale;
          for (int64_t i = 0; i < D; i++) {
            dqr[i] += ds * kr[i];
            dkr[i] += ds * qr[i];
          }
        }
      }
    }
  free(p);
  return true;
}

/* ---- losses ---- */

/* forward: loss, lse[N]; backward (dloss, logits, labels, lse) -> dlogits */
static bool ev_cross_entropy(Ev *e) {
  bool grad = e->n->op == IR_OP_CROSS_ENTROPY_GRAD;
  int o = grad ? 1 : 0;
  const IrTensor *x = IN(e, o), *lab = IN(e, o + 1);
  int64_t V = last(&x->shape), N = lab->n, ignore = iattr(e, IR_ATTR_IGNORE), count = 0;
  /* padded logits: the classes from `vocab` on are out of the softmax (dlogits 0) */
  int64_t Vr = ir_attrs_has(&e->n->attrs, IR_ATTR_VOCAB) ? iattr(e, IR_ATTR_VOCAB) : V;
  for (int64_t r = 0; r < N; r++) {
    double l = lab->d[r];
    if (l == (double)ignore) continue;
    if (!(l >= 0 && l < (double)Vr))
      return fail(e, "label %g at row %lld is outside [0, %lld) and is not the ignore index %lld",
                  l, (long long)r, (long long)Vr, (long long)ignore);
    count++;
  }
  if (grad) {
    const IrTensor *lse = IN(e, 3);
    IrTensor *dx = OUT(e, 0);
    double dl = IN(e, 0)->d[0];
    for (int64_t r = 0; r < N; r++) {
      bool ign = lab->d[r] == (double)ignore;
      for (int64_t c = 0; c < V; c++) {
        double g = exp(x->d[r * V + c] - lse->d[r]) - (c == (int64_t)lab->d[r]);
        dx->d[r * V + c] = ign || !count || c >= Vr ? 0 : dl * g / (double)count;
      }
    }
    return true;
  }
  IrTensor *loss = OUT(e, 0), *lse = OUT(e, 1);
  double total = 0;
  for (int64_t r = 0; r < N; r++) {
    const double *xr = x->d + r * V;
    double mx = -INFINITY, s = 0;
    for (int64_t c = 0; c < Vr; c++) mx = fmax(mx, xr[c]);
    for (int64_t c = 0; c < Vr; c++) s += exp(xr[c] - mx);
    lse->d[r] = mx + log(s);
    if (lab->d[r] != (double)ignore) total += lse->d[r] - xr[(int64_t)lab->d[r]];
  }
  loss->d[0] = count ? total / (double)count : 0;
  return true;
}

static bool ev_mse(Ev *e) {
  const IrTensor *a = IN(e, 0), *b = IN(e, 1);
  double s = 0;
  for (int64_t i = 0; i < a->n; i++) s += (a->d[i] - b->d[i]) * (a->d[i] - b->d[i]);
  OUT(e, 0)->d[0] = s / (double)a->n;
  return true;
}

/* ---- optimizer ---- */

static bool ev_optim(Ev *e) {
  IrOp op = e->n->op;
  if (op == IR_OP_GRAD_NORM) {
    double s = 0;
    for (int k = 0; k < e->n->nin; k++) {
      const IrTensor *g = IN(e, k);
      for (int64_t i = 0; i < g->n; i++) s += g->d[i] * g->d[i];
    }
    OUT(e, 0)->d[0] = sqrt(s);
    return true;
  }
  if (op == IR_OP_CLIP_SCALE) {
    double r = fattr(e, IR_ATTR_VALUE) / (IN(e, 0)->d[0] + 1e-6);
    OUT(e, 0)->d[0] = r < 1 ? r : 1;
    return true;
  }
  IrTensor *p = ir_store_get(e->st, e->n->in[0]);
  const IrTensor *g = IN(e, 1);
  double wd = fattr(e, IR_ATTR_WEIGHT_DECAY);
  if (op == IR_OP_ADAMW) {
    IrTensor *m = ir_store_get(e->st, e->n->in[2]), *v = ir_store_get(e->st, e->n->in[3]);
    double lr = IN(e, 4)->d[0], t = IN(e, 5)->d[0], sc = IN(e, 6)->d[0];
    double b1 = fattr(e, IR_ATTR_BETA1), b2 = fattr(e, IR_ATTR_BETA2), eps = fattr(e, IR_ATTR_EPS);
    if (!(t >= 1)) return fail(e, "step %g must be >= 1 (bias correction)", t);
    double c1 = 1 - pow(b1, t), c2 = 1 - pow(b2, t);
    for (int64_t i = 0; i < p->n; i++) {
      double gi = g->d[i] * sc;
      m->d[i] = b1 * m->d[i] + (1 - b1) * gi;
      v->d[i] = b2 * v->d[i] + (1 - b2) * gi * gi;
      p->d[i] -= lr * (wd * p->d[i] + (m->d[i] / c1) / (sqrt(v->d[i] / c2) + eps));
    }
  } else {
    IrTensor *mom = ir_store_get(e->st, e->n->in[2]);
    double lr = IN(e, 3)->d[0], sc = IN(e, 4)->d[0], mu = fattr(e, IR_ATTR_MOMENTUM);
    for (int64_t i = 0; i < p->n; i++) {
      double gi = g->d[i] * sc + wd * p->d[i];
      mom->d[i] = mu * mom->d[i] + gi;
      p->d[i] -= lr * mom->d[i];
    }
  }
  return true;
}

/* ---- fused elementwise programs ---- */

/* One elementwise op at element i (for fused programs); dropout uses i. */
static double elem(Ev *e, const IrFusedInstr *in, const double *a, uint64_t i) {
  const IrAttrs *at = &in->attrs;
  double r;
  switch (in->op) {
    case IR_OP_ADD: r = a[0] + a[1]; break;
    case IR_OP_SUB: r = a[0] - a[1]; break;
    case IR_OP_MUL: r = a[0] * a[1]; break;
    case IR_OP_DIV:
      r = ir_dtype_is_float(in->dtype) ? a[0] / a[1] : a[1] != 0 ? trunc(a[0] / a[1]) : 0;
      break;
    case IR_OP_POW: r = pow(a[0], a[1]); break;
    case IR_OP_ADD_SCALAR: r = a[0] + at->v[IR_ATTR_VALUE].f; break;
    case IR_OP_MUL_SCALAR: r = a[0] * at->v[IR_ATTR_VALUE].f; break;
    case IR_OP_POW_SCALAR: r = pow(a[0], at->v[IR_ATTR_VALUE].f); break;
    case IR_OP_CAST:
    case IR_OP_DETACH: r = a[0]; break;
    case IR_OP_DROPOUT: {
      double p = at->v[IR_ATTR_P].f;
      int64_t seed = ir_attrs_has(at, IR_ATTR_SEED) ? at->v[IR_ATTR_SEED].i : 0;
      r = a[0];
      if (p > 0) {
        double u = e->st->uniform ? e->st->uniform(e->st->user, seed, e->st->step, i)
                                  : ir_eval_uniform((uint64_t)seed, e->st->step, i);
        r = u >= p ? r / (1 - p) : 0;
      }
      break;
    }
    default: /* an activation, or its ACT_grad(dy, x) */
      r = ir_ops[in->op].min_in == 2 ? a[0] * act_bwd(in->op, a[1]) : act_fwd(in->op, a[0]);
      break;
  }
  return to_dtype(in->dtype, r);
}

static bool ev_fused(Ev *e) {
  Arena a;
  arena_init(&a);
  IrFusedProg prog;
  ir_fused_of(e->n, &prog, &a);
  IrTensor *y = OUT(e, 0);
  double *t = ARENA_ARRAY(&a, double, prog.n ? prog.n : 1);
  int64_t c[IR_MAX_RANK];
  for (int64_t i = 0; i < y->n; i++) {
    unravel(&y->shape, i, c);
    for (int k = 0; k < prog.n; k++) {
      const IrFusedInstr *in = &prog.ins[k];
      double args[IR_FUSED_MAX_ARGS];
      for (int j = 0; j < in->nargs; j++) {
        int r = in->arg[j];
        if (r >= 0) {
          args[j] = t[r];
        } else {
          const IrTensor *x = IN(e, -1 - r);
          args[j] = x->d[bidx(&y->shape, c, &x->shape)];
        }
      }
      t[k] = elem(e, in, args, (uint64_t)i);
    }
    y->d[i] = prog.n ? t[prog.n - 1] : 0;
  }
  arena_free(&a);
  return true;
}

/* ---- tables for text and video diffusion (ops.def says what each holds) ---- */

/* T5's bucket of relative position rel = key - query (bidirectional) */
static int64_t t5_bucket(int64_t rel, int64_t nb, int64_t maxd) {
  int64_t half = nb / 2, exact = half / 2, b = rel > 0 ? half : 0, a = rel < 0 ? -rel : rel;
  if (a < exact) return b + a;
  int64_t far = exact + (int64_t)(log((double)a / (double)exact) /
                                  log((double)maxd / (double)exact) * (double)(half - exact));
  return b + (far < half - 1 ? far : half - 1);
}

static bool ev_table(Ev *e) {
  IrTensor *y = OUT(e, 0);
  switch (e->n->op) {
    case IR_OP_REL_BUCKETS: {
      int64_t L = iattr(e, IR_ATTR_LEN);
      for (int64_t i = 0; i < L; i++)
        for (int64_t j = 0; j < L; j++)
          y->d[i * L + j] =
              (double)t5_bucket(j - i, iattr(e, IR_ATTR_BUCKETS), iattr(e, IR_ATTR_MAX_DISTANCE));
      return true;
    }
    case IR_OP_TIMESTEP_EMBEDDING: {
      const IrTensor *t = IN(e, 0);
      int64_t half = iattr(e, IR_ATTR_DIM) / 2;
      for (int64_t r = 0; r < t->n; r++)
        for (int64_t k = 0; k < half; k++) {
          double a = t->d[r] * exp(-log(fattr(e, IR_ATTR_THETA)) * (double)k / (double)half);
          y->d[r * 2 * half + k] = cos(a);
          y->d[r * 2 * half + half + k] = sin(a);
        }
      return true;
    }
    case IR_OP_DDPM_TABLE: {
      int64_t N = iattr(e, IR_ATTR_STEPS);
      double b0 = fattr(e, IR_ATTR_BETA_START), b1 = fattr(e, IR_ATTR_BETA_END), abar = 1,
             gamma = fattr(e, IR_ATTR_GAMMA), first = sqrt(1 - b0), last = 1;
      for (int64_t t = 0; t < N; t++) last *= 1 - (b0 + (b1 - b0) * (double)t / (double)(N - 1));
      last = sqrt(last);
      for (int64_t t = 0; t < N; t++) {
        abar *= 1 - (b0 + (b1 - b0) * (double)t / (double)(N - 1));
        double s = sqrt(abar);
        if (iattr(e, IR_ATTR_ZERO_SNR)) s = (s - last) * first / (first - last);
        double ab = s * s, snr = ab / (1 - ab);
        y->d[t * 3] = s;
        y->d[t * 3 + 1] = sqrt(1 - ab);
        y->d[t * 3 + 2] = (snr < gamma ? snr : gamma) / (snr + 1);
      }
      return true;
    }
    default: return fail(e, "not a table op");
  }
}

/* ---- dispatch ---- */

typedef bool (*EvFn)(Ev *e);

/* each op's kernel, as its EV column names it (NOEV: none) */
#define EV(fn) fn
#define NOEV   NULL
static const EvFn kernels[IR_OP_COUNT] = {
#define OP(N, S, MIN, MAX, NOUT, REQ, OPT, FLAGS, FLOPS, SHP, G, SHARD, E, ...) [IR_OP_##N] = E,
#include "ops.def"
#undef OP
};
#undef EV
#undef NOEV

bool ir_eval_node(const IrModule *m, const IrNode *n, IrTensorStore *st, char *err, size_t errlen) {
  char scratch[256];
  if (!err || !errlen) err = scratch, errlen = sizeof scratch;
  err[0] = 0;
  Ev e = {.m = m, .n = n, .st = st, .err = err, .errlen = errlen};
  EvFn fn = (unsigned)n->op < IR_OP_COUNT ? kernels[n->op] : NULL;
  if (!fn) return fail(&e, "the interpreter has no kernel for this op");
  for (int i = 0; i < n->nin; i++) {
    const IrTensor *t = ir_store_get(st, n->in[i]);
    if (!t) {
      const IrValue *v = n->in[i];
      return fail(&e, "operand %d (%c%s) has no value in the store", i,
                  v->def                     ? '%'
                  : v->role == IR_ROLE_PARAM ? '@'
                                             : '%',
                  v->name ? v->name : "result");
    }
    if (!ir_shape_eq(&t->shape, &n->in[i]->shape))
      return fail(&e, "operand %d has a stored tensor of another shape", i);
  }
  return fn(&e);
}

bool ir_eval_func(const IrModule *m, const IrFunc *f, IrTensorStore *st, char *err, size_t errlen) {
  for (int i = 0; i < f->nodes.len; i++) {
    const IrNode *n = f->nodes.items[i];
    if (!ir_eval_node(m, n, st, err, errlen)) {
      if (err && errlen) { /* prefix the node's position */
        char msg[512];
        snprintf(msg, sizeof msg, "%s", err);
        snprintf(err, errlen, "@%s node %d: %s", f->name, i, msg);
      }
      return false;
    }
  }
  return true;
}
