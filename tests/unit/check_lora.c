/* The `lora` pass on a small model from text: the adapters' names, shapes,
 * inits, layers and place in the parameter list; the base frozen; the
 * forward unchanged at initialisation (B = 0: the interpreter's loss with
 * LoRA equals the loss without, exactly); gradients for the adapters alone,
 * checked against central finite differences (train_fixture.h: h = 1e-6,
 * tolerance 1e-6 relative); one AdamW step moves the adapters and leaves
 * the base; the round trip of the text form; a setting whose Linear layers
 * no linear op uses is a located error. */
#include "frontend/sema.h"
#include "train_fixture.h"

/* Two blocks with a biased (q_proj) and an unbiased (v_proj) projection, a
 * stack of Linears named as a whole (fcs), a Linear called twice (proj),
 * and Linears left alone (the MLP's, head). */
static const char lora_mm[] =
    "import \"nn.mm\"\n"
    "\n"
    "module Block(dim: int) {\n"
    "  norm   = RMSNorm(dim)\n"
    "  q_proj = Linear(dim, dim)\n"
    "  v_proj = Linear(dim, dim, has_bias = false)\n"
    "  mlp    = MLP(dim, 2 * dim, act = \"gelu\")\n"
    "  forward(x: [B, T, dim]) -> [B, T, dim] {\n"
    "    h = norm(x)\n"
    "    return x + mlp(q_proj(h) * tanh(v_proj(h)))\n"
    "  }\n"
    "}\n"
    "\n"
    "model Tiny {\n"
    "  let B = 3\n"
    "  let T = 4\n"
    "  wte  = Embedding(11, 8)\n"
    "  h    = Block(8) x 2\n"
    "  fcs  = Linear(8, 8) x 2\n"
    "  proj = Linear(8, 8)\n"
    "  head = Linear(8, 11)\n"
    "  forward(ids: i32[B, T], labels: i32[B, T]) -> loss {\n"
    "    x = fcs(h(wte(ids)))\n"
    "    return cross_entropy(head(proj(proj(x))), labels, ignore = -100)\n"
    "  }\n"
    "  train {\n"
    "    LORA\n"
    "    optimizer = adamw(lr = 1e-2, betas = [0.9, 0.95], weight_decay = 0.1)\n"
    "  }\n"
    "}\n";

static const char lora_setting[] = "lora = lora(rank = 2, alpha = 3, targets = [h, fcs, proj], "
                                   "layers = [\"q_proj\", \"v_proj\", \"fcs\", \"proj\"])";

/* the adapted modules, their [out, in] */
static const char *const adapted[] = {"h.0.q_proj", "h.0.v_proj", "h.1.q_proj", "h.1.v_proj",
                                      "fcs.0",      "fcs.1",      "proj"};
#define NADAPTED ((int)(sizeof adapted / sizeof adapted[0]))

typedef struct Model {
  G g;
  FeProgram *p;
  FeResult r;
  char *text;
} Model;

/* Loads Tiny with the LoRA setting (or none) and runs verify, then lora
 * when asked. */
static void model_load(Model *md, bool with_lora, bool run_lora) {
  G *g = &md->g;
  g_init(g, 91);
  ir_module_free(g->m); /* the frontend's module replaces the fixture's */
  const char *at = strstr(lora_mm, "LORA");
  size_t n = strlen(lora_mm) + sizeof lora_setting;
  md->text = malloc(n);
  snprintf(md->text, n, "%.*s%s%s", (int)(at - lora_mm), lora_mm, with_lora ? lora_setting : "",
           at + 4);
  FeOptions fo = {0};
  md->p = fe_load_buffer(&g->d, "lora.mm", md->text, strlen(md->text), &fo);
  ck_assert_msg(md->p && g->d.errors == 0, "load: %s", g_diag(g));
  ck_assert_msg(fe_elaborate(md->p, "Tiny", &md->r), "elaborate: %s", g_diag(g));
  g->m = md->r.ir;
  g->f = ir_module_func(g->m, "forward");
  PassCtx cx = {.d = &g->d};
  ck_assert(pass_verify(g->m, &cx));
  if (run_lora) {
    ck_assert_msg(pass_lora(g->m, &cx), "lora: %s", g_diag(g));
    ck_assert_msg(ir_verify(g->m), "verify: %s", g_diag(g));
  }
}

static void model_free(Model *md) {
  fe_free(md->p);
  g_free(&md->g); /* frees md->r.ir */
  free(md->text);
}

/* Values: the init specs under seed 5, then noise on every parameter but
 * the lora_b adapters (so that norms and biases are generic and B stays 0);
 * then the inputs. */
static void model_values(Model *md) {
  G *g = &md->g;
  ir_store_init_params(&g->st, g->m, 5);
  for (int i = 0; i < g->m->params.len; i++) {
    IrValue *p = g->m->params.items[i];
    size_t n = strlen(p->name);
    if (n > 7 && strcmp(p->name + n - 7, ".lora_b") == 0) continue;
    IrTensor *t = ir_store_get(&g->st, p);
    for (int64_t k = 0; k < t->n; k++) t->d[k] += 0.2 * (g_rand(g) - 0.5);
  }
  static const int ids[12] = {1, 5, 7, 10, 0, 3, 3, 9, 2, 8, 6, 4};
  static const int labels[12] = {5, 7, 10, -100, 3, 9, 2, 8, 6, 4, 1, -100};
  for (int i = 0; i < g->f->inputs.len; i++) {
    IrValue *v = g->f->inputs.items[i];
    IrTensor *t = ir_store_put(&g->st, v);
    for (int64_t k = 0; k < t->n; k++) t->d[k] = !strcmp(v->name, "ids") ? ids[k] : labels[k];
  }
}

static bool is_adapter(const IrValue *p) {
  size_t n = strlen(p->name);
  return n > 7 && (!strcmp(p->name + n - 7, ".lora_a") || !strcmp(p->name + n - 7, ".lora_b"));
}

static int param_index(const IrModule *m, const char *name) {
  for (int i = 0; i < m->params.len; i++)
    if (!strcmp(((IrValue *)m->params.items[i])->name, name)) return i;
  return -1;
}

static IrValue *param(const IrModule *m, const char *fmt, const char *mod) {
  char name[256];
  snprintf(name, sizeof name, fmt, mod);
  IrValue *p = ir_module_param((IrModule *)m, name);
  ck_assert_msg(p != NULL, "no parameter @%s", name);
  return p;
}

START_TEST(test_lora_params) {
  Model md;
  model_load(&md, true, false);
  G *g = &md.g;
  int nbase = g->m->params.len;
  ck_assert_int_eq(md.r.train.lora.rank, 2);
  ck_assert(md.r.train.lora.alpha == 3);
  ck_assert_int_eq(md.r.train.lora.nmodules, NADAPTED);
  PassCtx cx = {.d = &g->d};
  ck_assert_msg(pass_lora(g->m, &cx), "lora: %s", g_diag(g));
  ck_assert_msg(ir_verify(g->m), "verify: %s", g_diag(g));
  ck_assert_int_eq(g->m->params.len, nbase + 2 * NADAPTED);
  for (int i = 0; i < NADAPTED; i++) {
    IrValue *w = param(g->m, "%s.weight", adapted[i]);
    IrValue *a = param(g->m, "%s.lora_a", adapted[i]), *b = param(g->m, "%s.lora_b", adapted[i]);
    /* A [r, in] fan_in(1) (PyTorch's kaiming_uniform(a = sqrt(5))), B [out, r] zeros, the weight's
     * dtype and layer */
    ck_assert_int_eq(a->shape.rank, 2);
    ck_assert_int_eq(a->shape.d[0], 2);
    ck_assert_int_eq(a->shape.d[1], w->shape.d[1]);
    ck_assert_int_eq(b->shape.rank, 2);
    ck_assert_int_eq(b->shape.d[0], w->shape.d[0]);
    ck_assert_int_eq(b->shape.d[1], 2);
    ck_assert(a->init.kind == IR_INIT_FAN_IN && a->init.a == 1.0);
    ck_assert(b->init.kind == IR_INIT_ZEROS);
    ck_assert(a->dtype == w->dtype && b->dtype == w->dtype);
    ck_assert(a->role == IR_ROLE_PARAM && !a->frozen && !b->frozen);
    ck_assert_int_eq(a->group, w->group);
    ck_assert_int_eq(a->layer, w->layer);
    ck_assert(w->frozen);
    /* placed right after the module's own parameters */
    char own[256];
    snprintf(own, sizeof own, "%s.bias", adapted[i]);
    int last = param_index(g->m, own) >= 0 ? param_index(g->m, own) : param_index(g->m, w->name);
    ck_assert_int_eq(param_index(g->m, a->name), last + 1);
    ck_assert_int_eq(param_index(g->m, b->name), last + 2);
  }
  ck_assert_int_eq(param(g->m, "%s.lora_a", "h.1.q_proj")->layer, 1);
  /* nothing else adapted; every base parameter frozen */
  ck_assert_ptr_null(ir_module_param(g->m, "head.lora_a"));
  ck_assert_ptr_null(ir_module_param(g->m, "h.0.mlp.fc1.lora_a"));
  int nadapters = 0;
  for (int i = 0; i < g->m->params.len; i++) {
    IrValue *p = g->m->params.items[i];
    ck_assert_msg(p->frozen == !is_adapter(p), "@%s frozen = %d", p->name, p->frozen);
    nadapters += is_adapter(p);
  }
  ck_assert_int_eq(nadapters, 2 * NADAPTED);
  /* one adapter path per linear node of an adapted module: proj is called
   * twice (shared adapters); each path is linear, linear, mul_scalar, add
   * in the original node's scope, the add reading the biased result */
  int scales = 0;
  for (int i = 0; i < g->f->nodes.len; i++) {
    IrNode *n = g->f->nodes.items[i];
    if (n->op != IR_OP_MUL_SCALAR) continue;
    scales++;
    ck_assert(n->attrs.v[IR_ATTR_VALUE].f == 1.5);
    IrNode *lb = n->in[0]->def, *la = lb->in[0]->def, *add = g->f->nodes.items[i + 1];
    ck_assert(lb->op == IR_OP_LINEAR && la->op == IR_OP_LINEAR && add->op == IR_OP_ADD &&
              add->in[1] == n->out[0]);
    ck_assert_str_eq(lb->in[1]->name + strlen(lb->in[1]->name) - 7, ".lora_b");
    ck_assert_str_eq(n->scope, lb->scope);
    ck_assert_str_eq(n->scope, la->scope);
    IrNode *y = add->in[0]->def; /* the biased result for q_proj, the linear for v_proj */
    if (strstr(n->scope, "q_proj"))
      ck_assert(y->op == IR_OP_ADD && y->in[0]->def->op == IR_OP_LINEAR);
    if (strstr(n->scope, "v_proj")) ck_assert(y->op == IR_OP_LINEAR && y->in[0] == la->in[0]);
    ck_assert(y->loc.line == la->loc.line && y->loc.col == la->loc.col);
  }
  ck_assert_int_eq(scales, NADAPTED + 1);
  assert_roundtrip(g);
  model_free(&md);
}
END_TEST

/* At initialisation B = 0: the loss with LoRA equals the loss without,
 * exactly; with B random it does not (the adapters are wired in). */
START_TEST(test_lora_forward_unchanged) {
  Model a, b;
  model_load(&a, true, true);
  model_load(&b, false, false);
  model_values(&a);
  model_values(&b);
  int copied = 0;
  for (int i = 0; i < b.g.m->params.len; i++) { /* the same base values */
    IrValue *p = b.g.m->params.items[i];
    IrTensor *src = ir_store_get(&a.g.st, ir_module_param(a.g.m, p->name)),
             *dst = ir_store_get(&b.g.st, p);
    ck_assert_int_eq(src->n, dst->n);
    memcpy(dst->d, src->d, sizeof(double) * (size_t)src->n);
    copied++;
  }
  ck_assert_int_eq(copied + 2 * NADAPTED, a.g.m->params.len);
  double la = g_forward_loss(&a.g), lb = g_forward_loss(&b.g);
  ck_assert_msg(la == lb, "loss with LoRA %.17g, without %.17g", la, lb);
  ck_assert(isfinite(la) && la > 0);
  for (int i = 0; i < a.g.m->params.len; i++) {
    IrValue *p = a.g.m->params.items[i];
    if (!is_adapter(p) || p->name[strlen(p->name) - 1] != 'b') continue;
    IrTensor *t = ir_store_get(&a.g.st, p);
    for (int64_t k = 0; k < t->n; k++) t->d[k] = 0.3 * (g_rand(&a.g) - 0.5);
  }
  double la2 = g_forward_loss(&a.g);
  ck_assert_msg(fabs(la2 - lb) > 1e-6, "B random: loss %.17g, without LoRA %.17g", la2, lb);
  model_free(&a);
  model_free(&b);
}
END_TEST

/* Gradients exist for the adapters alone and match finite differences
 * (every element of every adapter, with B random so that A's gradient is
 * not zero). */
START_TEST(test_lora_gradients) {
  Model md;
  model_load(&md, true, true);
  G *g = &md.g;
  model_values(&md);
  for (int i = 0; i < g->m->params.len; i++) {
    IrValue *p = g->m->params.items[i];
    if (!is_adapter(p)) continue;
    IrTensor *t = ir_store_get(&g->st, p);
    for (int64_t k = 0; k < t->n; k++) t->d[k] = 0.6 * (g_rand(g) - 0.5);
  }
  g_autodiff(g, &md.r.train);
  assert_roundtrip(g);
  IrFunc *train = ir_module_func(g->m, "train");
  for (int i = 0; i < g->m->params.len; i++) {
    IrValue *p = g->m->params.items[i];
    IrValue *gv = grad_of(train, p);
    ck_assert_msg((gv != NULL) == is_adapter(p), "@%s: gradient %s", p->name,
                  gv ? "present" : "missing");
  }
  g_check(g, 0);
  ck_assert_int_eq(g->checked, NADAPTED * (2 * 8 + 8 * 2)); /* every element of every adapter */
  /* at B = 0 the gradient of A is exactly zero and that of B is not */
  IrTensor *bq = ir_store_get(&g->st, ir_module_param(g->m, "h.0.q_proj.lora_b"));
  memset(bq->d, 0, sizeof(double) * (size_t)bq->n);
  g_copy_inputs(g, train, 0, 1);
  char err[512];
  ck_assert_msg(ir_eval_func(g->m, train, &g->st, err, sizeof err), "%s", err);
  const IrTensor *ga =
      ir_store_get(&g->st, grad_of(train, ir_module_param(g->m, "h.0.q_proj.lora_a")));
  const IrTensor *gb =
      ir_store_get(&g->st, grad_of(train, ir_module_param(g->m, "h.0.q_proj.lora_b")));
  double na = 0, nb = 0;
  for (int64_t k = 0; k < ga->n; k++) na += fabs(ga->d[k]);
  for (int64_t k = 0; k < gb->n; k++) nb += fabs(gb->d[k]);
  ck_assert(na == 0 && nb > 0);
  model_free(&md);
}
END_TEST

/* One AdamW step updates the adapters and nothing else; the optimizer
 * keeps state for the adapters alone. */
START_TEST(test_lora_optimizer_step) {
  Model md;
  model_load(&md, true, true);
  G *g = &md.g;
  int nparams = g->m->params.len;
  g_autodiff(g, &md.r.train);
  PassCtx cx = {.d = &g->d};
  ck_assert(pass_optimizer(g->m, &cx));
  ck_assert_msg(ir_verify(g->m), "%s", g_diag(g));
  assert_roundtrip(g);
  ck_assert_int_eq(g->m->params.len, nparams + 2 * 2 * NADAPTED);
  ck_assert_ptr_nonnull(ir_module_param(g->m, "adamw.m.proj.lora_a"));
  ck_assert_ptr_null(ir_module_param(g->m, "adamw.m.proj.weight"));
  model_values(&md);
  IrFunc *train = ir_module_func(g->m, "train");
  g_copy_inputs(g, train, 1e-2, 1);
  int np = g->m->params.len;
  double *before = malloc(sizeof(double) * (size_t)np);
  for (int i = 0; i < np; i++) before[i] = ir_store_get(&g->st, g->m->params.items[i])->d[0];
  char err[512];
  ck_assert_msg(ir_eval_func(g->m, train, &g->st, err, sizeof err), "%s", err);
  for (int i = 0; i < np; i++) {
    IrValue *p = g->m->params.items[i];
    if (p->role != IR_ROLE_PARAM) continue;
    double after = ir_store_get(&g->st, p)->d[0];
    /* B moves (its gradient is not zero); A only by weight decay: it moves too */
    if (is_adapter(p))
      ck_assert_msg(after != before[i], "@%s did not move", p->name);
    else
      ck_assert_msg(after == before[i], "frozen @%s moved", p->name);
  }
  free(before);
  model_free(&md);
}
END_TEST

/* Moved to IR text: without a lora setting nothing changes
 * (tests/passes/lora/no_setting.mmir); modules no linear uses are an error at
 * the setting (tests/passes/lora/unused_modules.mmir). */

static Suite *lora_suite(void) {
  Suite *s = suite_create("lora");
  TCase *tc = tcase_create("pass");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_lora_params);
  tcase_add_test(tc, test_lora_forward_unchanged);
  tcase_add_test(tc, test_lora_gradients);
  tcase_add_test(tc, test_lora_optimizer_step);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(lora_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
