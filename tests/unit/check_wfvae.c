/* check_wfvae.c: stdlib_models/wfvae.mm in the reference interpreter.
 *
 * - Causality: the latents (@encode, the posterior mean) of latent frames
 *   0 .. j do not change, element for element, when any input frame after
 *   4j changes (latent frame j covers input frames 4j - 3 .. 4j), and frame
 *   j + 1 does change (the check can fail).
 * - The Haar transforms of the model, 3D over 1 + 2k frames (the causal form)
 *   and 2D, then their inverses give the input back: the orthonormal ops to
 *   1e-6, WF-VAE's 3D coefficients (+-0.3536, not 1/sqrt 8) times
 *   8 * 0.3536^2 = 1.00025888 (the reference's transform is not exactly
 *   orthonormal), to 1e-6; band-major sub-bands with 3 channels. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/sema.h"
#include "train_fixture.h"

static const char tiny_mm[] =
    "import \"wfvae.mm\"\n"
    "model Causal extends WFVAETiny {\n"
    "  let B = 1\n"
    "  let F = 9\n"
    "  let S = 16\n"
    "  let base = 8\n"
    "  let enc_energy_flow = 8\n"
    "  let dec_energy_flow = 8\n"
    "  data { format = auto }\n" /* 16 x 16 frames are no clips: the base's clips_video dropped */
    "}\n"
    "model Pair {\n"
    "  w3 = Haar3D(3)\n"
    "  i3 = IHaar3D(3)\n"
    "  w2 = Haar2D(3)\n"
    "  i2 = IHaar2D(3)\n"
    "  forward(x: f32[2, 3, 9, 8, 8]) -> loss { return mse(i3(w3(x)), x) }\n"
    "  forward pair3(x: f32[2, 3, 9, 8, 8]) { return i3(w3(x)) }\n"
    "  forward plain3(x: f32[2, 3, 9, 8, 8]) {\n"
    "    return ihaar3d(haar3d(concat([x[:, :, 0:1], x], axis = 2)))[:, :, 1:]\n"
    "  }\n"
    "  forward band3(x: f32[2, 3, 9, 8, 8]) { return w3(x) }\n"
    "  forward pair2(y: f32[6, 3, 8, 8]) { return i2(w2(y)) }\n"
    "  forward plain2(y: f32[6, 3, 8, 8]) { return ihaar2d(haar2d(y)) }\n"
    "}\n";

static const char *cur_model;

typedef struct Ctx {
  G g;
  FeProgram *p;
  FeResult r;
} Ctx;

static void load(Ctx *c, const char *model) {
  g_init(&c->g, 5);
  ir_module_free(c->g.m);
  FeOptions fo = {0};
  const char *src = getenv("MMC_SOURCE_DIR");
  char name[4096];
  snprintf(name, sizeof name, "%s/stdlib_models/check_wfvae.mm", src ? src : ".");
  c->p = fe_load_buffer(&c->g.d, name, tiny_mm, strlen(tiny_mm), &fo);
  ck_assert_msg(c->p && c->g.d.errors == 0, "load: %s", g_diag(&c->g));
  ck_assert_msg(fe_elaborate(c->p, model, &c->r), "elaborate %s: %s", model, g_diag(&c->g));
  c->g.m = c->r.ir;
  cur_model = model;
}

static void done(Ctx *c) {
  fe_free(c->p);
  g_free(&c->g);
}

/* forward `fn` of the model as function @fn (fe_elaborate makes @forward only) */
static IrFunc *named(Ctx *c, const char *model, const char *fn) {
  IrFunc *f = ir_module_func(c->g.m, fn);
  if (!f) {
    ck_assert_msg(fe_elaborate_named(c->p, model, c->g.m, fn, fn, FE_TRAIN, 0, NULL),
                  "elaborate %s.%s: %s", model, fn, g_diag(&c->g));
    f = ir_module_func(c->g.m, fn);
  }
  return f;
}

static IrTensor *run(Ctx *c, const char *fn) {
  IrFunc *f = named(c, cur_model, fn);
  ck_assert_msg(f != NULL, "no function @%s", fn);
  char err[512];
  ck_assert_msg(ir_eval_func(c->g.m, f, &c->g.st, err, sizeof err), "@%s: %s", fn, err);
  return ir_store_get(&c->g.st, f->results.items[0]);
}

static IrTensor *input(Ctx *c, const char *fn) {
  IrFunc *f = named(c, cur_model, fn);
  ck_assert_msg(f != NULL, "no function @%s", fn);
  return ir_store_put(&c->g.st, f->inputs.items[0]);
}

START_TEST(test_latents_causal) {
  Ctx c;
  load(&c, "Causal");
  g_fill(&c.g);
  for (int i = 0; i < c.g.m->params.len; i++) { /* norms near 1, convs small */
    IrValue *p = c.g.m->params.items[i];
    IrTensor *t = ir_store_get(&c.g.st, p);
    if (p->shape.rank == 1 && strstr(p->name, "norm") && strstr(p->name, ".weight"))
      for (int64_t k = 0; k < t->n; k++) t->d[k] = 1 + 0.2 * t->d[k];
    else
      for (int64_t k = 0; k < t->n; k++) t->d[k] *= 0.3;
  }
  IrTensor *x = input(&c, "encode");
  ck_assert_int_eq(x->shape.rank, 5);
  const int64_t F = x->shape.d[2], frame = x->shape.d[3] * x->shape.d[4];
  for (int64_t k = 0; k < x->n; k++) x->d[k] = g_rand(&c.g);
  double *x0 = malloc(sizeof(double) * (size_t)x->n);
  memcpy(x0, x->d, sizeof(double) * (size_t)x->n);
  IrTensor *z = run(&c, "encode");
  ck_assert_int_eq(z->shape.rank, 5);
  const int64_t L = z->shape.d[1], TL = z->shape.d[2], zf = z->shape.d[3] * z->shape.d[4];
  ck_assert_int_eq(TL, (F - 1) / 4 + 1);
  double *z0 = malloc(sizeof(double) * (size_t)z->n);
  memcpy(z0, z->d, sizeof(double) * (size_t)z->n);
  for (int64_t j = 0; j + 1 < TL; j++) {
    memcpy(x->d, x0, sizeof(double) * (size_t)x->n);
    for (int64_t k = (4 * j + 1) * frame; k < F * frame; k++) x->d[k] = 1 - x->d[k];
    z = run(&c, "encode");
    double later = 0;
    for (int64_t l = 0; l < L; l++)
      for (int64_t t = 0; t < TL; t++)
        for (int64_t k = 0; k < zf; k++) {
          int64_t i = (l * TL + t) * zf + k;
          if (t <= j)
            ck_assert_msg(z->d[i] == z0[i],
                          "latent frame %lld changed (%g -> %g) when input frames after %lld did",
                          (long long)t, z0[i], z->d[i], (long long)(4 * j));
          else if (t == j + 1)
            later = fmax(later, fabs(z->d[i] - z0[i]));
        }
    ck_assert_msg(later > 1e-6, "latent frame %lld did not change with its input frames",
                  (long long)j + 1);
  }
  free(x0), free(z0);
  done(&c);
}
END_TEST

static double max_dev(const IrTensor *y, const IrTensor *x, double scale) {
  double m = 0;
  ck_assert_int_eq(y->n, x->n);
  for (int64_t k = 0; k < x->n; k++) m = fmax(m, fabs(y->d[k] - scale * x->d[k]));
  return m;
}

START_TEST(test_haar_inverse) {
  Ctx c;
  load(&c, "Pair");
  const double wf = 8 * 0.3536 * 0.3536; /* WF-VAE's 3D pair */
  IrTensor *x = input(&c, "pair3");
  for (int64_t k = 0; k < x->n; k++) x->d[k] = 2 * g_rand(&c.g) - 1;
  memcpy(input(&c, "plain3")->d, x->d, sizeof(double) * (size_t)x->n);
  memcpy(input(&c, "band3")->d, x->d, sizeof(double) * (size_t)x->n);
  double d3 = max_dev(run(&c, "pair3"), x, wf), p3 = max_dev(run(&c, "plain3"), x, 1);
  ck_assert_msg(d3 < 1e-6, "WF-VAE's 3D Haar then inverse: %g from %.8f x", d3, wf);
  ck_assert_msg(p3 < 1e-6, "haar3d then ihaar3d (causal form): %g from x", p3);
  ck_assert_msg(max_dev(run(&c, "pair3"), x, 1) > 1e-4, "the 0.3536 coefficient is not used");
  /* band-major: channel k*C + c of the 3D coefficients is band k of channel c;
   * band 0 of channel 1 at output frame 1 is 0.3536 * the sum of the 2x2x2
   * block of input frames 1, 2 (the first output frame holds frame 0 twice) */
  IrTensor *b = run(&c, "band3");
  const int64_t T2 = b->shape.d[2], h = b->shape.d[3], w = b->shape.d[4];
  ck_assert_int_eq(b->shape.d[1], 24);
  for (int64_t c1 = 0; c1 < 3; c1++) {
    double s = 0;
    for (int64_t t = 1; t <= 2; t++)
      for (int64_t i = 0; i < 2; i++)
        for (int64_t j = 0; j < 2; j++) s += x->d[((c1 * 9 + t) * 8 + i) * 8 + j];
    double got = b->d[((c1 * T2 + 1) * h + 0) * w + 0];
    ck_assert_msg(fabs(got - 0.3536 * s) < 1e-9, "band 0 channel %lld: %g, want %g", (long long)c1,
                  got, 0.3536 * s);
  }
  IrTensor *y = input(&c, "pair2");
  for (int64_t k = 0; k < y->n; k++) y->d[k] = 2 * g_rand(&c.g) - 1;
  memcpy(input(&c, "plain2")->d, y->d, sizeof(double) * (size_t)y->n);
  double d2 = max_dev(run(&c, "pair2"), y, 1), p2 = max_dev(run(&c, "plain2"), y, 1);
  ck_assert_msg(d2 < 1e-6 && p2 < 1e-6, "2D Haar then inverse: %g (model), %g (ops)", d2, p2);
  done(&c);
}
END_TEST

static Suite *wfvae_suite(void) {
  Suite *s = suite_create("wfvae");
  TCase *tc = tcase_create("interpreter");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, test_latents_causal);
  tcase_add_test(tc, test_haar_inverse);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(wfvae_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
