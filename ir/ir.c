/* The IR core: the op and attribute tables (built from ops.def and
 * attrs.def), the names of the enums, module construction, the node builder
 * (arity, attributes, shape rule) and the FLOP count of a node.
 * Everything a module owns lives in its arena; ir_module_free drops it. */
#include "ir.h"

#include <stdlib.h>
#include <string.h>

/* ---- the tables ---- */

/* Columns of ops.def: attribute masks and FLOP classes. */
#define A(X)             (1ull << IR_ATTR_##X)
#define FL_NONE          .flop_kind = IR_FL_NONE
#define FL_ELEM(k)       .flop_kind = IR_FL_ELEM, .flop_per_elem = (k)
#define FL_MATMUL        .flop_kind = IR_FL_MATMUL
#define FL_LINEAR        .flop_kind = IR_FL_LINEAR
#define FL_CONV          .flop_kind = IR_FL_CONV
#define FL_ATTENTION     .flop_kind = IR_FL_ATTENTION
#define FL_LINEAR_W      .flop_kind = IR_FL_LINEAR_W
#define FL_CONV_X        .flop_kind = IR_FL_CONV_X
#define FL_CONV_W        .flop_kind = IR_FL_CONV_W
#define FL_ATTENTION_BWD .flop_kind = IR_FL_ATTENTION_BWD
/* the SHAPE column names ir_shape_R; the grad column ir_grad_R (GRAD(R)),
 * a shared rule and the op it emits (GRAD_VIA(R, OP)), or none (NOGRAD) */
#define SHAPE(R)       ir_shape_##R
#define GRAD(R)        .grad = ir_grad_##R
#define GRAD_VIA(R, O) .grad = ir_grad_##R, .grad_op = IR_OP_##O
#define NOGRAD         .grad = NULL
/* the SH column: the sharding rule and how partial sums pass */
#define SH(R, PF) .shard = IR_SHR_##R, .shard_pflags = (PF)
#define P_NO      0u
#define P_ALL     IR_SHP_ALL
#define P_ONE     IR_SHP_ONE
#define P_FIRST   IR_SHP_FIRST
#define SEQ       IR_SHP_SEQ
#define P_PROG    IR_SHP_PROG

_Static_assert(IR_ATTR_COUNT <= 64, "attribute masks are 64-bit");

const IrOpInfo ir_ops[IR_OP_COUNT] = {
#define OP(N, S, MIN, MAX, NOUT, REQ, OPT, FLAGS, FLOPS, SHP, G, SHARD, ...)                       \
  [IR_OP_##N] = {.name = S,                                                                        \
                 .min_in = MIN,                                                                    \
                 .max_in = MAX,                                                                    \
                 .nout = NOUT,                                                                     \
                 .req_attrs = REQ,                                                                 \
                 .opt_attrs = OPT,                                                                 \
                 .flags = FLAGS,                                                                   \
                 FLOPS,                                                                            \
                 .shape = SHP,                                                                     \
                 G,                                                                                \
                 SHARD},
#include "ops.def"
#undef OP
};

const IrAttrInfo ir_attrs[IR_ATTR_COUNT] = {
#define ATTR(N, S, K) [IR_ATTR_##N] = {.name = S, .kind = IR_AK_##K},
#include "attrs.def"
#undef ATTR
};

bool ir_op_parse(const char *name, IrOp *out) {
  for (int i = 0; i < IR_OP_COUNT; i++)
    if (strcmp(ir_ops[i].name, name) == 0) {
      *out = (IrOp)i;
      return true;
    }
  return false;
}

/* ---- enum names ---- */

static const struct {
  const char *name;
  int size;
  bool is_float;
} dtypes[IR_DTYPE_COUNT] = {
    [IR_F32] = {"f32", 4, true},    [IR_BF16] = {"bf16", 2, true}, [IR_F16] = {"f16", 2, true},
    [IR_I32] = {"i32", 4, false},   [IR_I64] = {"i64", 8, false},  [IR_U8] = {"u8", 1, false},
    [IR_BOOL] = {"bool", 1, false},
};

const char *ir_dtype_name(IrDType t) {
  return (unsigned)t < IR_DTYPE_COUNT ? dtypes[t].name : "?";
}
int ir_dtype_size(IrDType t) {
  return (unsigned)t < IR_DTYPE_COUNT ? dtypes[t].size : 0;
}
bool ir_dtype_is_float(IrDType t) {
  return (unsigned)t < IR_DTYPE_COUNT && dtypes[t].is_float;
}

bool ir_dtype_parse(const char *s, IrDType *out) {
  for (int i = 0; i < IR_DTYPE_COUNT; i++)
    if (strcmp(dtypes[i].name, s) == 0) {
      *out = (IrDType)i;
      return true;
    }
  return false;
}

const char *ir_axis_name(IrAxis a) {
  return (unsigned)a < IR_NAXES ? mesh_axis_name((int)a) : "?";
}

static const char *const role_names[IR_ROLE_COUNT] = {
    [IR_ROLE_ACT] = "act",   [IR_ROLE_INPUT] = "input", [IR_ROLE_PARAM] = "param",
    [IR_ROLE_GRAD] = "grad", [IR_ROLE_OPT] = "opt",
};
const char *ir_role_name(IrRole r) {
  return (unsigned)r < IR_ROLE_COUNT ? role_names[r] : "?";
}

/* The index of s in names[0..n), or -1. */
static int name_index(const char *const *names, int n, const char *s) {
  for (int i = 0; i < n; i++)
    if (strcmp(names[i], s) == 0) return i;
  return -1;
}

bool ir_role_parse(const char *s, IrRole *out) {
  int i = name_index(role_names, IR_ROLE_COUNT, s);
  if (i >= 0) *out = (IrRole)i;
  return i >= 0;
}

static const char *const pp_part_names[IR_PP_COUNT] = {
    [IR_PP_NONE] = "-", [IR_PP_F] = "F", [IR_PP_I] = "I", [IR_PP_W] = "W", [IR_PP_U] = "U"};
const char *ir_pp_part_name(IrPpPart p) {
  return (unsigned)p < IR_PP_COUNT ? pp_part_names[p] : "?";
}

bool ir_pp_part_parse(const char *s, IrPpPart *out) {
  int i = name_index(pp_part_names, IR_PP_COUNT, s);
  if (i > IR_PP_NONE) *out = (IrPpPart)i;
  return i > IR_PP_NONE;
}

static const char *const init_names[] = {
    [IR_INIT_NONE] = "none",     [IR_INIT_ZEROS] = "zeros",   [IR_INIT_ONES] = "ones",
    [IR_INIT_FILL] = "fill",     [IR_INIT_NORMAL] = "normal", [IR_INIT_UNIFORM] = "uniform",
    [IR_INIT_FAN_IN] = "fan_in",
};
#define NINIT ((int)(sizeof init_names / sizeof init_names[0]))

const char *ir_init_name(IrInitKind k) {
  return (unsigned)k < NINIT ? init_names[k] : "?";
}

bool ir_init_parse(const char *s, IrInitKind *out) {
  int i = name_index(init_names, NINIT, s);
  if (i >= 0) *out = (IrInitKind)i;
  return i >= 0;
}

/* ---- shapes ---- */

#define MAX_NUMEL (INT64_C(1) << 53)

int64_t ir_numel(const IrShape *s) {
  int64_t n = 1;
  for (int i = 0; i < s->rank && i < IR_MAX_RANK; i++)
    if (__builtin_mul_overflow(n, s->d[i], &n)) return INT64_MAX;
  return n;
}

bool ir_shape_eq(const IrShape *a, const IrShape *b) {
  if (a->rank != b->rank) return false;
  for (int i = 0; i < a->rank && i < IR_MAX_RANK; i++)
    if (a->d[i] != b->d[i]) return false;
  return true;
}

bool ir_shape_valid(const IrShape *s) {
  if (s->rank < 0 || s->rank > IR_MAX_RANK) return false;
  int64_t n = 1;
  for (int i = 0; i < s->rank; i++) {
    if (s->d[i] < 1 || __builtin_mul_overflow(n, s->d[i], &n) || n > MAX_NUMEL) return false;
  }
  return true;
}

char *ir_shape_str(char *buf, size_t n, const IrShape *s) {
  if (n == 0) return buf;
  size_t k = 0;
  buf[0] = 0;
  int r = s->rank < 0 ? 0 : s->rank > IR_MAX_RANK ? IR_MAX_RANK : s->rank;
  k += (size_t)snprintf(buf, n, "[");
  for (int i = 0; i < r && k < n; i++)
    k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)s->d[i]);
  if (k < n) snprintf(buf + k, n - k, "]");
  return buf;
}

/* ---- attributes ---- */

static IrAttrVal *attr_slot(IrAttrs *a, IrAttrId id, IrAttrKind kind) {
  MM_ASSERT((unsigned)id < IR_ATTR_COUNT && ir_attrs[id].kind == kind);
  a->set |= 1ull << id;
  IrAttrVal *v = &a->v[id];
  memset(v, 0, sizeof *v);
  return v;
}

void ir_attrs_set_int(IrAttrs *a, IrAttrId id, int64_t v) {
  attr_slot(a, id, IR_AK_INT)->i = v;
}
void ir_attrs_set_float(IrAttrs *a, IrAttrId id, double v) {
  attr_slot(a, id, IR_AK_FLOAT)->f = v;
}
void ir_attrs_set_bool(IrAttrs *a, IrAttrId id, bool v) {
  attr_slot(a, id, IR_AK_BOOL)->i = v;
}
void ir_attrs_set_dtype(IrAttrs *a, IrAttrId id, IrDType v) {
  attr_slot(a, id, IR_AK_DTYPE)->i = v;
}
void ir_attrs_set_mesh(IrAttrs *a, IrAttrId id, IrAxis v) {
  attr_slot(a, id, IR_AK_MESH)->i = v;
}

void ir_attrs_set_ints(IrAttrs *a, IrAttrId id, const int64_t *v, int n) {
  IrAttrVal *s = attr_slot(a, id, IR_AK_INTS);
  s->ints = (int64_t *)v; /* borrowed until ir_build copies it */
  s->nints = n;
}

bool ir_attrs_has(const IrAttrs *a, IrAttrId id) {
  return (unsigned)id < IR_ATTR_COUNT && (a->set >> id & 1);
}

int ir_norm_dim(const IrAttrs *a, const IrShape *x) {
  return ir_attrs_has(a, IR_ATTR_AXIS) ? (int)a->v[IR_ATTR_AXIS].i : x->rank - 1;
}

/* ---- maps ---- */

static uint64_t hash_key(bool str_keys, const void *key) {
  uint64_t h;
  if (str_keys) {
    h = 1469598103934665603ull; /* FNV-1a */
    for (const unsigned char *s = key; *s; s++) h = (h ^ *s) * 1099511628211ull;
  } else {
    h = (uint64_t)(uintptr_t)key * 0x9E3779B97F4A7C15ull;
    h ^= h >> 29;
  }
  return h;
}

static bool key_eq(bool str_keys, const void *a, const void *b) {
  return str_keys ? strcmp(a, b) == 0 : a == b;
}

void ir_map_init(IrMap *mp, Arena *a, bool str_keys) {
  memset(mp, 0, sizeof *mp);
  mp->arena = a;
  mp->str_keys = str_keys;
}

IrMapSlot *ir_map_get(const IrMap *mp, const void *key) {
  if (!mp->cap || !key) return NULL;
  uint64_t h = hash_key(mp->str_keys, key);
  for (int i = (int)(h & (uint64_t)(mp->cap - 1));; i = (i + 1) & (mp->cap - 1)) {
    IrMapSlot *s = &mp->slots[i];
    if (!s->key) return NULL;
    if (s->hash == h && key_eq(mp->str_keys, s->key, key)) return s;
  }
}

IrMapSlot *ir_map_put(IrMap *mp, const void *key) {
  MM_ASSERT(key != NULL);
  if (2 * (mp->len + 1) > mp->cap) { /* keep the load under one half */
    int ncap = mp->cap ? mp->cap * 2 : 16;
    IrMapSlot *ns = ARENA_ARRAY(mp->arena, IrMapSlot, ncap);
    for (int i = 0; i < mp->cap; i++) {
      IrMapSlot *s = &mp->slots[i];
      if (!s->key) continue;
      int j = (int)(s->hash & (uint64_t)(ncap - 1));
      while (ns[j].key) j = (j + 1) & (ncap - 1);
      ns[j] = *s;
    }
    mp->slots = ns;
    mp->cap = ncap;
  }
  uint64_t h = hash_key(mp->str_keys, key);
  int i = (int)(h & (uint64_t)(mp->cap - 1));
  for (;; i = (i + 1) & (mp->cap - 1)) {
    IrMapSlot *s = &mp->slots[i];
    if (!s->key) break;
    if (s->hash == h && key_eq(mp->str_keys, s->key, key)) return s;
  }
  IrMapSlot *s = &mp->slots[i];
  s->key = key;
  s->hash = h;
  mp->len++;
  return s;
}

/* ---- modules ---- */

IrModule *ir_module_new(Diag *diag, const char *name) {
  IrModule *m = calloc(1, sizeof *m);
  if (!m) mm_die(__FILE__, __LINE__, "out of memory");
  arena_init(&m->arena);
  m->diag = diag;
  m->name = arena_strdup(&m->arena, name ? name : "module");
  for (int a = 0; a < IR_NAXES; a++) m->mesh[a] = 1;
  ir_settings_default(&m->plan, &m->train);
  return m;
}

void ir_module_free(IrModule *m) {
  if (!m) return;
  arena_free(&m->arena);
  free(m);
}

IrFunc *ir_func_new(IrModule *m, const char *name) {
  IrFunc *f = ARENA_NEW(&m->arena, IrFunc);
  f->name = arena_strdup(&m->arena, name ? name : "func");
  ptrvec_push(&m->arena, &m->funcs, f);
  return f;
}

IrFunc *ir_module_func(IrModule *m, const char *name) {
  for (int i = 0; i < m->funcs.len; i++) {
    IrFunc *f = m->funcs.items[i];
    if (strcmp(f->name, name) == 0) return f;
  }
  return NULL;
}

IrValue *ir_module_param(IrModule *m, const char *name) {
  for (int i = 0; i < m->params.len; i++) {
    IrValue *v = m->params.items[i];
    if (strcmp(v->name, name) == 0) return v;
  }
  return NULL;
}

/* Finds the group by name (raising its layer count to nlayers if larger) or
 * adds it. */
int ir_module_group(IrModule *m, const char *name, int nlayers) {
  for (int i = 0; i < m->groups.len; i++) {
    IrGroup *g = m->groups.items[i];
    if (strcmp(g->name, name) == 0) {
      if (nlayers > g->nlayers) g->nlayers = nlayers;
      return i;
    }
  }
  IrGroup *g = ARENA_NEW(&m->arena, IrGroup);
  g->name = arena_strdup(&m->arena, name);
  g->nlayers = nlayers;
  ptrvec_push(&m->arena, &m->groups, g);
  return m->groups.len - 1;
}

static IrValue *new_value(IrModule *m, IrDType dt, const IrShape *s, IrRole role, SrcLoc loc) {
  MM_ASSERT(s->rank >= 0 && s->rank <= IR_MAX_RANK);
  IrValue *v = ARENA_NEW(&m->arena, IrValue);
  v->id = -1;
  v->dtype = dt;
  v->shape = *s;
  v->role = role;
  for (int a = 0; a < IR_NAXES; a++) v->pl[a] = (IrPlacement){IR_PL_B, 0};
  v->loc = loc;
  v->group = v->layer = -1;
  return v;
}

IrValue *ir_add_param(IrModule *m, const char *name, IrDType dt, const IrShape *s, IrInit init,
                      SrcLoc loc) {
  IrValue *v = new_value(m, dt, s, IR_ROLE_PARAM, loc);
  v->name =
      name ? arena_strdup(&m->arena, name) : arena_printf(&m->arena, "param%d", m->params.len);
  v->init = init;
  ptrvec_push(&m->arena, &m->params, v);
  return v;
}

IrValue *ir_add_input(IrModule *m, IrFunc *f, const char *name, IrDType dt, const IrShape *s,
                      SrcLoc loc) {
  IrValue *v = new_value(m, dt, s, IR_ROLE_INPUT, loc);
  v->name = name ? arena_strdup(&m->arena, name) : arena_printf(&m->arena, "arg%d", f->inputs.len);
  ptrvec_push(&m->arena, &f->inputs, v);
  return v;
}

void ir_func_add_result(IrModule *m, IrFunc *f, IrValue *v) {
  ptrvec_push(&m->arena, &f->results, v);
}

void ir_func_renumber(IrFunc *f) {
  int id = 0;
  for (int i = 0; i < f->nodes.len; i++) {
    IrNode *n = f->nodes.items[i];
    for (int j = 0; j < n->nout; j++) n->out[j]->id = id++;
  }
  f->next_id = id;
}

/* ---- the builder ---- */

#define FAIL(...) (snprintf(err, errlen, __VA_ARGS__), (IrNode *)NULL)

/* Negative axes count from the end; the node stores them non-negative so
 * that passes compare axes directly. Out-of-range ones are left for the
 * shape rule to report as written. */
static void canon_axes(IrNode *n) {
  if (n->nin < 1) return;
  int64_t r = n->in[0]->shape.rank;
  IrAttrVal *v = &n->attrs.v[IR_ATTR_AXIS];
  if (ir_attrs_has(&n->attrs, IR_ATTR_AXIS) && v->i < 0 && v->i >= -r) v->i += r;
  v = &n->attrs.v[IR_ATTR_AXES];
  if (ir_attrs_has(&n->attrs, IR_ATTR_AXES))
    for (int i = 0; i < v->nints; i++)
      if (v->ints[i] < 0 && v->ints[i] >= -r) v->ints[i] += r;
}

IrNode *ir_build(IrBuilder *b, IrOp op, IrValue **in, int nin, const IrAttrs *attrs, SrcLoc loc,
                 char *err, size_t errlen, int *bad_operand) {
  char scratch[256];
  if (!err || errlen == 0) {
    err = scratch;
    errlen = sizeof scratch;
  }
  err[0] = 0;
  if (bad_operand) *bad_operand = -1;
  MM_ASSERT(b && b->m && b->f);
  IrModule *m = b->m;
  if ((unsigned)op >= IR_OP_COUNT) return FAIL("unknown op #%d", (int)op);
  const IrOpInfo *info = &ir_ops[op];
  MM_ASSERT(info->max_in <= 64 && info->nout >= 0 && info->nout <= 4);

  if (nin < info->min_in || nin > info->max_in) {
    if (info->min_in == info->max_in)
      return FAIL("%s: expects %d operand%s, got %d", info->name, info->min_in,
                  info->min_in == 1 ? "" : "s", nin);
    return FAIL("%s: expects %d to %d operands, got %d", info->name, info->min_in, info->max_in,
                nin);
  }
  for (int i = 0; i < nin; i++)
    if (!in[i]) {
      if (bad_operand) *bad_operand = i;
      return FAIL("%s: operand %d is missing", info->name, i);
    }
  uint64_t set = attrs ? attrs->set : 0;
  uint64_t missing = info->req_attrs & ~set, extra = set & ~(info->req_attrs | info->opt_attrs);
  if (missing)
    return FAIL("%s: missing attribute '%s'", info->name, ir_attrs[__builtin_ctzll(missing)].name);
  if (extra) {
    int k = __builtin_ctzll(extra);
    if (k >= IR_ATTR_COUNT) return FAIL("%s: unknown attribute #%d", info->name, k);
    return FAIL("%s: unexpected attribute '%s'", info->name, ir_attrs[k].name);
  }
  if (b->group != -1 || b->layer != -1) {
    if (b->group < 0 || b->group >= m->groups.len)
      return FAIL("%s: invalid layer group #%d", info->name, b->group);
    const IrGroup *g = m->groups.items[b->group];
    if (b->layer < 0 || b->layer >= g->nlayers)
      return FAIL("%s: layer %d is out of range for group \"%s\" of %d layers", info->name,
                  b->layer, g->name, g->nlayers);
  }

  IrNode *n = ARENA_NEW(&m->arena, IrNode);
  n->op = op;
  n->nin = nin;
  n->in = ARENA_ARRAY(&m->arena, IrValue *, nin ? nin : 1);
  if (nin) memcpy(n->in, in, sizeof(IrValue *) * (size_t)nin);
  n->attrs.set = set;
  for (int k = 0; k < IR_ATTR_COUNT; k++) {
    if (!(set >> k & 1)) continue;
    IrAttrVal v = attrs->v[k];
    if (ir_attrs[k].kind == IR_AK_INTS) {
      if (v.nints < 0 || (v.nints && !v.ints))
        return FAIL("%s: attribute '%s' has no valid list", info->name, ir_attrs[k].name);
      int64_t *copy = ARENA_ARRAY(&m->arena, int64_t, v.nints ? v.nints : 1);
      if (v.nints) memcpy(copy, v.ints, sizeof(int64_t) * (size_t)v.nints);
      v.ints = copy;
    } else if (ir_attrs[k].kind == IR_AK_STR) {
      v.s = arena_strdup(&m->arena, v.s ? v.s : "");
    }
    n->attrs.v[k] = v;
  }
  canon_axes(n);

  IrShapeCtx cx;
  memset(&cx, 0, sizeof cx);
  cx.node = n;
  cx.nin = nin;
  for (int i = 0; i < nin; i++) {
    cx.in_dtype[i] = in[i]->dtype;
    cx.in_shape[i] = &in[i]->shape;
  }
  cx.err = err;
  cx.errlen = errlen;
  cx.bad_operand = -1;
  if (!info->shape(&cx)) {
    if (bad_operand) *bad_operand = cx.bad_operand;
    if (!err[0]) snprintf(err, errlen, "%s: invalid operands", info->name);
    return NULL;
  }
  for (int j = 0; j < info->nout; j++) {
    const IrShape *s = &cx.out_shape[j];
    MM_ASSERT(s->rank >= 0 && s->rank <= IR_MAX_RANK && (unsigned)cx.out_dtype[j] < IR_DTYPE_COUNT);
    if (!ir_shape_valid(s)) {
      char buf[200];
      return FAIL("%s: shape %s has too many elements", info->name,
                  ir_shape_str(buf, sizeof buf, s));
    }
  }
  if (op == IR_OP_RESHAPE) { /* store the shape with its -1 resolved */
    IrAttrVal *v = &n->attrs.v[IR_ATTR_SHAPE];
    for (int i = 0; i < v->nints; i++) v->ints[i] = cx.out_shape[0].d[i];
  }

  n->nout = info->nout;
  n->out = ARENA_ARRAY(&m->arena, IrValue *, n->nout ? n->nout : 1);
  for (int j = 0; j < n->nout; j++) {
    IrValue *v = new_value(m, cx.out_dtype[j], &cx.out_shape[j], IR_ROLE_ACT, loc);
    v->id = b->f->next_id++;
    v->def = n;
    n->out[j] = v;
  }
  n->loc = loc;
  n->group = b->group;
  n->layer = b->layer;
  if (b->scope) { /* consecutive nodes of one instance share the string */
    IrNode *prev = b->f->nodes.len ? b->f->nodes.items[b->f->nodes.len - 1] : NULL;
    n->scope = prev && prev->scope && strcmp(prev->scope, b->scope) == 0
                   ? prev->scope
                   : arena_strdup(&m->arena, b->scope);
  }
  ptrvec_push(&m->arena, &b->f->nodes, n);
  return n;
}

/* ---- FLOPs ---- */

static int64_t mul_sat(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_mul_overflow(a, b, &r) ? INT64_MAX : r;
}

static int64_t last_dim(const IrValue *v) {
  return v->shape.rank ? v->shape.d[v->shape.rank - 1] : 1;
}

/* 2 FLOPs per multiply-add. FL_ELEM ops count k per element of the larger
 * of the result and the first operand: the result for pointwise ops (it is
 * the broadcast shape), the input for reductions and losses (whose result
 * is small or a scalar). Causal attention is reported in full (no halving). */
int64_t ir_flops(const IrNode *n) {
  if ((unsigned)n->op >= IR_OP_COUNT) return 0;
  const IrOpInfo *info = &ir_ops[n->op];
  int64_t out =
      n->nout >= 1 ? ir_numel(&n->out[0]->shape) : 0; /* nout 0: optimizer steps count the input */
  switch (info->flop_kind) {
    case IR_FL_NONE: return 0;
    case IR_FL_ELEM: {
      int64_t in0 = n->nin ? ir_numel(&n->in[0]->shape) : 0;
      return mul_sat(info->flop_per_elem, in0 > out ? in0 : out);
    }
    case IR_FL_MATMUL: /* 2 * batch * M * N * K */
    case IR_FL_LINEAR: /* 2 * rows * N * K */
      return n->nin < 1 ? 0 : mul_sat(2, mul_sat(out, last_dim(n->in[0])));
    case IR_FL_CONV: { /* 2 * B * Cout * out_spatial * Cin * kernel volume */
      if (n->nin < 2) return 0;
      const IrShape *w = &n->in[1]->shape;
      int64_t per_out = 1;
      for (int i = 1; i < w->rank; i++) per_out = mul_sat(per_out, w->d[i]);
      return mul_sat(2, mul_sat(out, per_out));
    }
    case IR_FL_ATTENTION: { /* q k^T: 2*B*H*T*S*D, then p v: 2*B*H*T*S*Dv */
      if (n->nin < 3 || n->in[0]->shape.rank != 4 || n->in[1]->shape.rank != 4) return 0;
      const IrShape *q = &n->in[0]->shape, *k = &n->in[1]->shape;
      int64_t bht = mul_sat(mul_sat(q->d[0], q->d[1]), q->d[2]);
      int64_t d = q->d[3] + last_dim(n->in[2]);
      return mul_sat(2, mul_sat(mul_sat(bht, k->d[1]), d));
    }
    case IR_FL_LINEAR_W: /* dy[rows, N], x[rows, K] */
      return n->nin < 2 ? 0 : mul_sat(2, mul_sat(ir_numel(&n->in[0]->shape), last_dim(n->in[1])));
    case IR_FL_CONV_X:   /* 2 * numel(dy) * Cin * kernel volume, from w (operand 1) */
    case IR_FL_CONV_W: { /* the same, from dw's shape */
      if (n->nin < 2 || n->nout < 1) return 0;
      const IrShape *w = info->flop_kind == IR_FL_CONV_X ? &n->in[1]->shape : &n->out[0]->shape;
      int64_t per_out = 1;
      for (int i = 1; i < w->rank; i++) per_out = mul_sat(per_out, w->d[i]);
      return mul_sat(2, mul_sat(ir_numel(&n->in[0]->shape), per_out));
    }
    case IR_FL_ATTENTION_BWD: { /* attention_grad(dy, q, k, v, ...): q k^T again, dp = dy v^T,
                                   dv = p^T dy, dq = ds k, dk = ds^T q: 2*B*H*T*S*(3D + 2Dv) */
      if (n->nin < 4 || n->in[1]->shape.rank != 4 || n->in[2]->shape.rank != 4) return 0;
      const IrShape *q = &n->in[1]->shape, *k = &n->in[2]->shape;
      int64_t bht = mul_sat(mul_sat(q->d[0], q->d[1]), q->d[2]);
      int64_t d = mul_sat(3, q->d[3]) + mul_sat(2, last_dim(n->in[3]));
      return mul_sat(2, mul_sat(mul_sat(bht, k->d[1]), d));
    }
  }
  return 0;
}

void ir_func_dce(IrFunc *f) {
  /* live marks in the values' aux slots */
  for (int i = 0; i < f->inputs.len; i++) ((IrValue *)f->inputs.items[i])->aux = NULL;
  for (int i = 0; i < f->nodes.len; i++) {
    IrNode *n = f->nodes.items[i];
    for (int j = 0; j < n->nin; j++) n->in[j]->aux = NULL;
    for (int j = 0; j < n->nout; j++) n->out[j]->aux = NULL;
  }
  static char live;
  for (int i = 0; i < f->results.len; i++) ((IrValue *)f->results.items[i])->aux = &live;
  int kept = 0;
  for (int i = f->nodes.len - 1; i >= 0; i--) {
    IrNode *n = f->nodes.items[i];
    bool keep = (ir_ops[n->op].flags & OPF_INPLACE) != 0;
    for (int j = 0; j < n->nout && !keep; j++) keep = n->out[j]->aux == &live;
    if (!keep) {
      f->nodes.items[i] = NULL;
      continue;
    }
    kept++;
    for (int j = 0; j < n->nin; j++) n->in[j]->aux = &live;
  }
  int k = 0;
  for (int i = 0; i < f->nodes.len; i++)
    if (f->nodes.items[i]) f->nodes.items[k++] = f->nodes.items[i];
  f->nodes.len = k;
  k = 0;
  for (int i = 0; i < f->inputs.len; i++) {
    IrValue *v = f->inputs.items[i];
    if (v->aux == &live) f->inputs.items[k++] = v;
  }
  f->inputs.len = k;
  for (int i = 0; i < f->inputs.len; i++) ((IrValue *)f->inputs.items[i])->aux = NULL;
  for (int i = 0; i < f->nodes.len; i++) {
    IrNode *n = f->nodes.items[i];
    for (int j = 0; j < n->nin; j++) n->in[j]->aux = NULL;
    for (int j = 0; j < n->nout; j++) n->out[j]->aux = NULL;
  }
  (void)kept;
}

static bool update_op(const IrNode *n) {
  return n->op == IR_OP_GRAD_NORM || n->op == IR_OP_CLIP_SCALE ||
         (ir_ops[n->op].flags & OPF_OPTIMIZER);
}

void ir_train_phases(const IrFunc *f, int *bwd, int *upd) {
  *bwd = *upd = -1;
  const IrValue *loss = f->results.len ? f->results.items[0] : NULL;
  while (loss && loss->def && ir_op_is_collective(loss->def->op))
    loss = loss->def->in[0]; /* e.g. summed over dp */
  bool after_loss = false;
  for (int i = 0; i < f->nodes.len; i++) {
    const IrNode *n = f->nodes.items[i];
    if (*bwd < 0 && after_loss && n->op == IR_OP_FULL && n->out[0]->shape.rank == 0) *bwd = i;
    for (int j = 0; j < n->nout; j++) after_loss |= loss && n->out[j] == loss;
    if (*upd < 0 && update_op(n)) *upd = i;
  }
}

void ir_update_part(const IrFunc *f, int upd, Arena *a, unsigned char *u) {
  int N = f->nodes.len;
  IrMap late;
  ir_map_init(&late, a, false);
  for (int i = 0; i < N; i++) {
    const IrNode *n = f->nodes.items[i];
    bool x = upd >= 0 && i >= upd && update_op(n);
    for (int k = 0; k < n->nin && upd >= 0 && i >= upd && !x; k++)
      x = ir_map_get(&late, n->in[k]) != NULL;
    for (int j = 0; x && j < n->nout; j++) ir_map_put(&late, n->out[j]);
    u[i] = x;
  }
  /* a constant made for the update: read, and read by update nodes only */
  for (int i = upd < 0 ? N : upd; i < N; i++) {
    const IrNode *n = f->nodes.items[i];
    if (n->nin != 0 || u[i]) continue;
    int readers = 0;
    bool only = true;
    for (int j = 0; j < N && only; j++) {
      const IrNode *c = f->nodes.items[j];
      for (int k = 0; k < c->nin; k++)
        for (int o = 0; o < n->nout; o++)
          if (c->in[k] == n->out[o]) readers++, only = only && u[j];
    }
    u[i] = readers > 0 && only;
  }
}

const char *ir_phase_name(int i, int bwd, int upd) {
  if (upd >= 0 && i >= upd) return "update";
  if (bwd >= 0 && i >= bwd) return "backward";
  return "forward";
}
