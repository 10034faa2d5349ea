/* The backend passes on small graphs written as IR text: fuse (which chains
 * merge, which do not, the sub-program's text form and its errors) and
 * memplan (views, in-place reuse, no overlap of buffers live at once, the
 * summary's arena sizes), on every stdlib model as well. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/sema.h"
#include "ir/ir.h"
#include "ir/ir_fused.h"
#include "passes/memplan.h"
#include "passes/pass.h"

bool pass_fuse(IrModule *m, PassCtx *cx);
bool pass_memplan(IrModule *m, PassCtx *cx);

typedef struct T {
  Diag d;
  char *dbuf;
  size_t dlen;
  IrModule *m;
  PassCtx cx;
} T;

static IrModule *parse(T *t, const char *text) {
  memset(t, 0, sizeof *t);
  diag_init(&t->d);
  t->d.out = open_memstream(&t->dbuf, &t->dlen);
  t->cx.d = &t->d;
  t->m = ir_parse(&t->d, diag_add_buffer(&t->d, "t.mmir", text, strlen(text)));
  fflush(t->d.out);
  ck_assert_msg(t->m != NULL, "parse failed: %s", t->dbuf ? t->dbuf : "");
  return t->m;
}

static void t_free(T *t) {
  ir_module_free(t->m);
  fclose(t->d.out);
  free(t->dbuf);
  diag_free(&t->d);
}

static char *print(const IrModule *m) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  ir_print_module(f, m);
  fclose(f);
  return buf;
}

static const IrNode *node(const IrModule *m, int fi, int i) {
  const IrFunc *f = m->funcs.items[fi];
  ck_assert_int_lt(i, f->nodes.len);
  return f->nodes.items[i];
}

#define HDR                                                                                        \
  "module @t mesh(dp = 1, cp = 1, tp = 1)\nparam @b : f32[8] init(zeros)\nparam @s : f32[8] "      \
  "init(ones)\n"

/* The fuse pass on IR text moved to tests/passes/fuse/ (returned_value.mmir:
 * a returned value ends a group; limits.mmir: values with two uses or
 * smaller than the loop stay outside; no_fuse.mmir). */

START_TEST(test_fused_prog_errors) {
  static const struct {
    const char *prog, *msg;
  } bad[] = {
      {"t0 = matmul(i0, i1)", "not an elementwise op"},
      {"t0 = frob(i0)", "unknown op"},
      {"t0 = add(i0, i0)", "i1 is not used"},
      {"t0 = add(i0, i2)", "i2 is not an operand"},
      {"t0 = exp(i0); t1 = exp(i1); t2 = add(t1, i0)", "t0 is not used"},
      {"t1 = exp(i0)", "numbered in order"},
      {"t0 = exp(t0)", "used before it is defined"},
      {"t0 = mul_scalar(i0)", "missing attribute 'value'"},
      {"t0 = exp(i0) {value = 1}", "unexpected attribute 'value'"},
      {"t0 = add(i0)", "takes 2 operands"},
      {"", "empty program"},
      {"t0 = exp(i0) t1", "expected ';'"},
  };
  Arena a;
  arena_init(&a);
  IrDType dt[2] = {IR_F32, IR_F32};
  IrShape s = {.rank = 1, .d = {4}};
  const IrShape *sh[2] = {&s, &s};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    IrFusedProg p;
    char err[256] = "";
    ck_assert_msg(!ir_fused_parse(bad[i].prog, 2, dt, sh, &p, &a, err, sizeof err), "%s parsed",
                  bad[i].prog);
    ck_assert_msg(strstr(err, bad[i].msg), "'%s': got '%s', expected '%s'", bad[i].prog, err,
                  bad[i].msg);
  }
  /* a type error comes from the op's own shape rule */
  IrShape s3 = {.rank = 1, .d = {3}};
  const IrShape *sh3[2] = {&s, &s3};
  IrFusedProg p;
  char err[256] = "";
  ck_assert(!ir_fused_parse("t0 = add(i0, i1)", 2, dt, sh3, &p, &a, err, sizeof err));
  ck_assert_msg(strstr(err, "broadcast"), "%s", err);
  /* formatting round-trips, attributes included */
  ck_assert(ir_fused_parse("t0 = dropout(i0) {p = 0.1, seed = 3}; t1 = cast(t0) {dtype = i32}", 1,
                           dt, sh, &p, &a, err, sizeof err));
  ck_assert_str_eq(ir_fused_format(&p, &a),
                   "t0 = dropout(i0) {p = 0.1, seed = 3}; t1 = cast(t0) {dtype = i32}");
  ck_assert_int_eq(p.ins[1].dtype, IR_I32);
  arena_free(&a);
}
END_TEST

/* Every pair of values live at the same node is disjoint, from the
 * annotations alone (what codegen trusts), except values that share storage
 * on purpose: a view and its operand, an in-place result and the operand it
 * overwrites (joined in one set here). */
typedef struct Live {
  const IrValue *v;
  int def, last, set;
} Live;

static int find(Live *lv, int k) {
  while (lv[k].set != k) k = lv[k].set = lv[lv[k].set].set;
  return k;
}

static void check_no_overlap(const IrModule *m) {
  for (int fi = 0; fi < m->funcs.len; fi++) {
    const IrFunc *f = m->funcs.items[fi];
    int n = f->nodes.len, nl = 0;
    IrMap idx;
    Arena a;
    arena_init(&a);
    ir_map_init(&idx, &a, false);
    Live *lv = ARENA_ARRAY(&a, Live, n * 4 + 1);
    for (int i = 0; i < n; i++) {
      const IrNode *nd = f->nodes.items[i];
      for (int j = 0; j < nd->nout; j++) {
        ck_assert(nd->out[j]->mem_planned);
        ir_map_put(&idx, nd->out[j])->i = nl;
        lv[nl] = (Live){nd->out[j], i, i, nl};
        nl++;
      }
    }
    for (int i = 0; i < n; i++) {
      const IrNode *nd = f->nodes.items[i];
      for (int q = 0; q < nd->nin; q++) {
        IrMapSlot *s = ir_map_get(&idx, nd->in[q]);
        if (!s) continue;
        if (i > lv[s->i].last) lv[s->i].last = i;
        const IrValue *x = nd->in[q], *y = nd->nout == 1 ? nd->out[0] : NULL;
        bool shares = y && x->mem_arena == y->mem_arena &&
                      (mp_view_offset(m, nd) >= 0 ||
                       ((ir_ops[nd->op].flags & OPF_ELEMWISE) && x->mem_offset == y->mem_offset));
        if (shares) lv[find(lv, (int)ir_map_get(&idx, y)->i)].set = find(lv, (int)s->i);
      }
    }
    for (int r = 0; r < f->results.len; r++) {
      IrMapSlot *s = ir_map_get(&idx, f->results.items[r]);
      if (s) lv[s->i].last = n;
    }
    for (int x = 0; x < nl; x++)
      for (int y = x + 1; y < nl; y++) {
        const IrValue *a1 = lv[x].v, *b1 = lv[y].v;
        if (a1->mem_arena != b1->mem_arena || find(lv, x) == find(lv, y)) continue;
        bool time = lv[x].def <= lv[y].last && lv[y].def <= lv[x].last;
        int64_t ae = a1->mem_offset + mp_value_bytes(m, a1),
                be = b1->mem_offset + mp_value_bytes(m, b1);
        bool space = a1->mem_offset < be && b1->mem_offset < ae;
        ck_assert_msg(!(time && space), "@%s: %%%d and %%%d overlap while live", f->name, a1->id,
                      b1->id);
      }
    arena_free(&a);
  }
}

START_TEST(test_memplan_small) {
  T t;
  IrModule *m = parse(
      &t, HDR "func @forward(%x : f32[4, 8], %r : f32[4, 8]) {\n"
              "  %0 = add(%x, @b) : f32[4, 8]\n"              /* 128 bytes */
              "  %1 = gelu(%0) : f32[4, 8]\n"                 /* in place over %0 */
              "  %2 = reshape(%1) {shape = [32]} : f32[32]\n" /* a view */
              "  %3 = exp(%2) : f32[32]\n"                    /* in place again */
              "  %4 = reshape(%3) {shape = [4, 8]} : f32[4, 8]\n"
              "  %5 = add(%4, %r) : f32[4, 8]\n"
              "  %6 = slice(@s) {axis = 0, start = 2, stop = 6} : f32[4]\n" /* a view of a param */
              "  %7 = sum(%5) {axes = [0]} : f32[8]\n"
              "  return %7, %6\n"
              "}\n");
  ck_assert(pass_memplan(m, &t.cx));
  const IrValue *v0 = node(m, 0, 0)->out[0];
  for (int i = 1; i < 6; i++) {
    const IrValue *v = node(m, 0, i)->out[0];
    ck_assert_int_eq(v->mem_arena, IR_ROLE_ACT);
    ck_assert_int_eq(v->mem_offset, v0->mem_offset); /* one buffer all along */
  }
  const IrValue *s = m->params.items[1], *v6 = node(m, 0, 6)->out[0];
  ck_assert_int_eq(v6->mem_arena, IR_ROLE_PARAM);
  ck_assert_int_eq(v6->mem_offset, s->mem_offset + 8);
  ck_assert_int_eq(s->mem_offset, 64); /* @b is 32 bytes, aligned to 64 */
  const IrFunc *f = m->funcs.items[0];
  ck_assert_int_eq(((IrValue *)f->inputs.items[1])->mem_offset, 128);
  check_no_overlap(m);
  MpSummary sum;
  char err[128];
  ck_assert(mp_summarize(m, &sum, err, sizeof err));
  ck_assert_int_eq(sum.arena[IR_ROLE_PARAM], 128);
  ck_assert_int_eq(sum.arena[IR_ROLE_INPUT], 256);
  ck_assert_int_eq(sum.arena[IR_ROLE_ACT], 192); /* [4, 8] and the sum [8], live together */
  ck_assert_int_eq(sum.total, 128 + 256 + 192);
  ck_assert_int_eq(sum.funcs[0].ninplace, 3);
  ck_assert_int_eq(sum.funcs[0].nviews, 3);
  /* annotated IR round-trips */
  char *p1 = print(m);
  ck_assert_ptr_nonnull(strstr(p1, "mem(act, 0)"));
  T u;
  IrModule *m2 = parse(&u, p1);
  char *p2 = print(m2);
  ck_assert_str_eq(p1, p2);
  MpSummary sum2;
  ck_assert(mp_summarize(m2, &sum2, err, sizeof err));
  ck_assert_int_eq(sum2.total, sum.total);
  free(p1);
  free(p2);
  t_free(&u);
  t_free(&t);
}
END_TEST

/* The whole pipeline on every stdlib model: a plan with no overlap, and a
 * peak no smaller than the sum of live bytes. */
START_TEST(test_memplan_stdlib) {
  const char *dir = getenv("MMC_SOURCE_DIR");
  static const struct {
    const char *file, *model;
  } models[] = {{"gpt2.mm", "GPT2Tiny"},
                {"vit_fashion.mm", "ViTFashion"},
                {"internvl2.mm", NULL},
                {"llm.mm", NULL}};
  for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
    char path[1024];
    snprintf(path, sizeof path, "%s/stdlib_models/%s", dir ? dir : ".", models[i].file);
    Diag d;
    diag_init(&d);
    FeOptions fo = {0};
    mm_plan_flags_init(&fo.flags);
    FeProgram *p = fe_load(&d, path, &fo);
    ck_assert_msg(p && !d.errors, "%s does not load", path);
    const char *name = models[i].model ? models[i].model : fe_model_name(p, 0);
    FeResult r;
    ck_assert(fe_elaborate(p, name, &r));
    PassCtx cx = {.d = &d};
    ck_assert_msg(pass_run_pipeline(r.ir, &cx, NULL, NULL, NULL), "%s: pipeline", name);
    check_no_overlap(r.ir);
    MpSummary s;
    char err[128];
    ck_assert(mp_summarize(r.ir, &s, err, sizeof err));
    for (int k = 0; k < s.nfuncs; k++)
      ck_assert_int_ge(s.funcs[k].arena[IR_ROLE_ACT], s.funcs[k].live_peak);
    ck_assert_int_gt(s.arena[IR_ROLE_GRAD], 0);
    ir_module_free(r.ir);
    fe_free(p);
    diag_free(&d);
  }
}
END_TEST

static Suite *backend_suite(void) {
  Suite *s = suite_create("backend");
  TCase *tc = tcase_create("passes");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_fused_prog_errors);
  tcase_add_test(tc, test_memplan_small);
  tcase_add_test(tc, test_memplan_stdlib);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(backend_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
