/* Training IR end to end: autodiff of a whole model from the frontend
 * against finite differences of its loss (a sample of every parameter),
 * frozen parameters, the located error of an op without a gradient rule,
 * the optimizer ops against hand-computed AdamW and SGD steps with bias
 * correction and clipping, and the text form of ops without results and of
 * gradient links. Tolerances: train_fixture.h (gradients), 1e-12 relative
 * (optimizer steps, both sides in double). */
#include "frontend/sema.h"
#include "train_fixture.h"

/* ---- a whole model ---- */

/* A 2-layer GPT-ish model: GQA attention (6 heads, 2 KV heads) with RoPE
 * and qk-norm, layer norms, a GELU MLP, learned positions, cross entropy
 * with ignored labels; the token embedding is frozen. */
static const char tiny_mm[] =
    "import \"nn.mm\"\n"
    "\n"
    "module Block(dim: int, heads: int, kvh: int) {\n"
    "  ln_1 = LayerNorm(dim)\n"
    "  attn = Attention(dim, heads, kv_heads = kvh, causal = true, rope_theta = 100.0, qk_norm = "
    "true)\n"
    "  ln_2 = LayerNorm(dim)\n"
    "  mlp  = MLP(dim, 2 * dim, act = \"gelu\")\n"
    "  forward(x: [B, T, dim]) -> [B, T, dim] {\n"
    "    h = x + attn(ln_1(x))\n"
    "    return h + mlp(ln_2(h))\n"
    "  }\n"
    "}\n"
    "\n"
    "model Tiny {\n"
    "  let B = 3\n"
    "  let T = 5\n"
    "  wte  = Embedding(11, 12)\n"
    "  wpe  = param f32[T, 12] = normal(0.1)\n"
    "  h    = Block(12, 6, 2) x 2\n"
    "  ln_f = LayerNorm(12)\n"
    "  head = Linear(12, 11)\n"
    "  forward(ids: i32[B, T], labels: i32[B, T]) -> loss {\n"
    "    x = wte(ids) + wpe\n"
    "    return cross_entropy(head(ln_f(h(x))), labels, ignore = -100)\n"
    "  }\n"
    "  train {\n"
    "    freeze = [wte]\n"
    "    optimizer = adamw(lr = 1e-3, betas = [0.9, 0.95], weight_decay = 0.1, clip = 1.0)\n"
    "  }\n"
    "}\n";

typedef struct Model {
  G g;
  FeProgram *p;
  FeResult r;
} Model;

static void model_load(Model *md) {
  G *g = &md->g;
  g_init(g, 77);
  ir_module_free(g->m); /* the frontend's module replaces the fixture's */
  FeOptions fo = {0};
  md->p = fe_load_buffer(&g->d, "tiny.mm", tiny_mm, strlen(tiny_mm), &fo);
  ck_assert_msg(md->p && g->d.errors == 0, "load: %s", g_diag(g));
  ck_assert_msg(fe_elaborate(md->p, "Tiny", &md->r), "elaborate: %s", g_diag(g));
  g->m = md->r.ir;
  g->f = ir_module_func(g->m, "forward");
  PassCtx cx = {.d = &g->d};
  ck_assert(pass_verify(g->m, &cx));
  /* values: the init specs, then noise so that norms' weights and biases are generic */
  ir_store_init_params(&g->st, g->m, 5);
  for (int i = 0; i < g->m->params.len; i++) {
    IrTensor *t = ir_store_get(&g->st, g->m->params.items[i]);
    for (int64_t k = 0; k < t->n; k++) t->d[k] += 0.2 * (g_rand(g) - 0.5);
  }
  static const int ids[15] = {1, 5, 7, 10, 0, 3, 3, 9, 2, 8, 6, 4, 1, 0, 10};
  static const int labels[15] = {5, 7, 10, 0, -100, 3, 9, 2, 8, -100, 4, 1, 0, 10, 6};
  for (int i = 0; i < g->f->inputs.len; i++) {
    IrValue *v = g->f->inputs.items[i];
    IrTensor *t = ir_store_put(&g->st, v);
    for (int64_t k = 0; k < t->n; k++) t->d[k] = !strcmp(v->name, "ids") ? ids[k] : labels[k];
  }
}

static void model_free(Model *md) {
  fe_free(md->p);
  g_free(&md->g); /* frees md->r.ir */
}

START_TEST(test_model_gradients) {
  Model md;
  model_load(&md);
  G *g = &md.g;
  g_autodiff(g, &md.r.train);
  assert_roundtrip(g);
  g_check(g, 4);
  ck_assert_int_gt(g->checked, 100);
  /* the frozen embedding has no gradient; every other parameter one */
  IrFunc *train = ir_module_func(g->m, "train");
  IrValue *wte = ir_module_param(g->m, "wte.weight");
  ck_assert(wte && wte->frozen);
  ck_assert_ptr_null(grad_of(train, wte));
  int ngrads = 0;
  for (int i = 0; i < g->m->params.len; i++)
    ngrads += grad_of(train, g->m->params.items[i]) != NULL;
  ck_assert_int_eq(ngrads, g->m->params.len - 1);
  model_free(&md);
}
END_TEST

START_TEST(test_model_optimizer) {
  Model md;
  model_load(&md);
  G *g = &md.g;
  int nparams = g->m->params.len;
  g_autodiff(g, &md.r.train);
  PassCtx cx = {.d = &g->d};
  ck_assert(pass_optimizer(g->m, &cx));
  ck_assert_msg(ir_verify(g->m), "%s", g_diag(g));
  assert_roundtrip(g);
  /* two state tensors per trainable param, none for the frozen one */
  ck_assert_int_eq(g->m->params.len, nparams + 2 * (nparams - 1));
  ck_assert_ptr_null(ir_module_param(g->m, "adamw.m.wte.weight"));
  IrValue *m = ir_module_param(g->m, "adamw.m.head.weight");
  ck_assert(m && m->role == IR_ROLE_OPT && m->init.kind == IR_INIT_ZEROS);
  ck_assert(ir_shape_eq(&m->shape, &ir_module_param(g->m, "head.weight")->shape));
  char *s = print_str(g->m);
  ck_assert_ptr_nonnull(strstr(s, "clip_scale("));
  ck_assert_ptr_nonnull(strstr(s, "{value = 1}"));
  ck_assert_ptr_nonnull(strstr(s, "  adamw(@head.weight, "));
  ck_assert_ptr_nonnull(strstr(s, "{eps = 1e-08, beta1 = 0.9, beta2 = 0.95, weight_decay = 0.1}"));
  free(s);
  /* one step moves every trainable parameter and leaves the frozen one */
  ir_store_init_params(&g->st, g->m, 5);
  IrFunc *train = ir_module_func(g->m, "train");
  g_copy_inputs(g, train, 1e-3, 1);
  double before = ir_store_get(&g->st, ir_module_param(g->m, "head.weight"))->d[0];
  double frozen = ir_store_get(&g->st, ir_module_param(g->m, "wte.weight"))->d[0];
  char err[512];
  ck_assert_msg(ir_eval_func(g->m, train, &g->st, err, sizeof err), "%s", err);
  ck_assert(ir_store_get(&g->st, ir_module_param(g->m, "head.weight"))->d[0] != before);
  ck_assert(ir_store_get(&g->st, ir_module_param(g->m, "wte.weight"))->d[0] == frozen);
  model_free(&md);
}
END_TEST

/* The whole pipeline (the passes after optimizer rewrite @train: fuse,
 * memplan) keeps its meaning: one step from the same values gives the same
 * loss, gradients and updated parameters as @train straight after the
 * optimizer pass. */
START_TEST(test_pipeline_preserves_train) {
  Model a, b;
  model_load(&a);
  model_load(&b);
  PassCtx ca = {.d = &a.g.d}, cb = {.d = &b.g.d};
  ck_assert(pass_run_pipeline(a.g.m, &ca, "optimizer", NULL, NULL));
  ck_assert_msg(pass_run_pipeline(b.g.m, &cb, NULL, NULL, NULL), "%s", g_diag(&b.g));
  Model *ms[2] = {&a, &b};
  for (int k = 0; k < 2; k++) {
    G *g = &ms[k]->g;
    char err[512];
    IrFunc *train = ir_module_func(g->m, "train");
    ir_store_init_params(&g->st, g->m, 5);
    g_copy_inputs(g, train, 1e-2, 1);
    ck_assert_msg(ir_eval_func(g->m, train, &g->st, err, sizeof err), "%s", err);
  }
  IrFunc *ta = ir_module_func(a.g.m, "train"), *tb = ir_module_func(b.g.m, "train");
  double la = ir_store_get(&a.g.st, ta->results.items[0])->d[0],
         lb = ir_store_get(&b.g.st, tb->results.items[0])->d[0];
  ck_assert_msg(fabs(la - lb) <= 1e-12 * (1 + fabs(la)), "loss %.15g vs %.15g", la, lb);
  ck_assert_int_eq(a.g.m->params.len, b.g.m->params.len);
  for (int i = 0; i < a.g.m->params.len; i++) {
    IrValue *pa = a.g.m->params.items[i], *pb = ir_module_param(b.g.m, pa->name);
    ck_assert_ptr_nonnull(pb);
    const IrTensor *xa = ir_store_get(&a.g.st, pa), *xb = ir_store_get(&b.g.st, pb);
    for (int64_t k = 0; k < xa->n; k++)
      ck_assert_msg(fabs(xa->d[k] - xb->d[k]) <= 1e-12 * (1 + fabs(xa->d[k])),
                    "@%s[%lld]: %.15g vs %.15g", pa->name, (long long)k, xa->d[k], xb->d[k]);
    IrValue *ga = grad_of(ta, pa), *gb = grad_of(tb, pb);
    ck_assert((ga == NULL) == (gb == NULL));
    if (!ga) continue;
    xa = ir_store_get(&a.g.st, ga), xb = ir_store_get(&b.g.st, gb);
    for (int64_t k = 0; k < xa->n; k++)
      ck_assert_msg(fabs(xa->d[k] - xb->d[k]) <= 1e-12 * (1 + fabs(xa->d[k])),
                    "grad @%s[%lld]: %.15g vs %.15g", pa->name, (long long)k, xa->d[k], xb->d[k]);
  }
  model_free(&a);
  model_free(&b);
}
END_TEST

/* ---- errors ---- */

static IrModule *parse_text(G *g, const char *name, const char *text) {
  uint32_t id = diag_add_buffer(&g->d, name, text, strlen(text));
  return ir_parse(&g->d, id);
}

/* relu_grad (a backward op, no rule of its own) on the path from @w to
 * the loss; a second one off the path (only the frozen @f reaches it) is
 * fine. */
static const char no_rule_text[] = "module @M mesh(dp = 1, cp = 1, tp = 1)\n"
                                   "param @w : f32[3, 4] init(normal, 0.02)\n"
                                   "param @f : f32[3, 4] init(normal, 0.02) frozen\n"
                                   "func @forward(%x : f32[3, 4]) {\n"
                                   "  %0 = relu_grad(%x, @f) : f32[3, 4] loc(\"m.mm\":4:9)\n"
                                   "  %1 = mul(%0, @w) : f32[3, 4] loc(\"m.mm\":5:9)\n"
                                   "  %2 = relu_grad(%1, %x) : f32[3, 4] loc(\"m.mm\":6:7)\n"
                                   "  %3 = sum(%2) {axes = [0, 1]} : f32[] loc(\"m.mm\":7:10)\n"
                                   "  return %3\n"
                                   "}\n";

START_TEST(test_no_rule_error) {
  G g;
  g_init(&g, 1);
  ir_module_free(g.m);
  static const char src[] =
      "line 1\nline 2\nline 3\nline 4\nline 5\n    y = relu_grad(h, x)\nline 7\n";
  diag_add_buffer(&g.d, "m.mm", src, strlen(src));
  g.m = parse_text(&g, "m.mmir", no_rule_text);
  ck_assert_msg(g.m != NULL, "%s", g_diag(&g));
  PassCtx cx = {.d = &g.d};
  ck_assert(!pass_autodiff(g.m, &cx));
  const char *out = g_diag(&g);
  ck_assert_msg(
      strstr(out,
             "m.mm:6:7: error: no gradient rule for op 'relu_grad' (needed by the gradient of @w)"),
      "%s", out);
  ck_assert_msg(!strstr(out, "m.mm:4:9"), "%s", out); /* the one off the path */
  ck_assert_int_eq(g.d.errors, 1);
  g_free(&g);
}
END_TEST

/* ---- the causal 3D convolution (nn.mm CausalConv3d) ---- */

/* Two causal convolutions (kernel 3 with spatial padding, then kernel 2),
 * then the wavelet pair on the result (the identity) */
static const char causal_mm[] =
    "import \"nn.mm\"\n"
    "model Causal {\n"
    "  let B = 2\n"
    "  a = CausalConv3d(2, 3, 3, padding = 1)\n"
    "  b = CausalConv3d(3, 2, 2)\n"
    "  forward(x: f32[B, 2, 6, 4, 6], y: f32[B, 2, 6, 3, 5]) -> loss {\n"
    "    h = b(relu(a(x)))\n"
    "    return mse(ihaar3d(haar3d(h[:, :, :, 0:2, 0:4])), y[:, :, :, 0:2, 0:4]) + mse(h, y)\n"
    "  }\n"
    "}\n";

/* Output frame t of the causal convolutions does not change when any input
 * frame after t changes (every element compared exactly: those frames do
 * not enter its sums), and frame t + 1 does change (the check can fail);
 * the composition's gradients against finite differences. */
START_TEST(test_causal_conv3d) {
  G g;
  g_init(&g, 91);
  ir_module_free(g.m);
  FeOptions fo = {0};
  FeProgram *p = fe_load_buffer(&g.d, "causal.mm", causal_mm, strlen(causal_mm), &fo);
  ck_assert_msg(p && g.d.errors == 0, "load: %s", g_diag(&g));
  FeResult r;
  ck_assert_msg(fe_elaborate(p, "Causal", &r), "elaborate: %s", g_diag(&g));
  g.m = r.ir;
  g.f = ir_module_func(g.m, "forward");
  g_fill(&g);
  for (int i = 0; i < g.f->inputs.len; i++) {
    IrTensor *t = ir_store_put(&g.st, g.f->inputs.items[i]);
    for (int64_t k = 0; k < t->n; k++) t->d[k] = 2 * g_rand(&g) - 1;
  }
  const IrValue *out = NULL; /* b's result: the last conv3d */
  for (int i = 0; i < g.f->nodes.len; i++) {
    const IrNode *nd = g.f->nodes.items[i];
    if (nd->op == IR_OP_CONV3D) out = nd->out[0];
  }
  ck_assert_ptr_nonnull(out);
  ck_assert_int_eq(out->shape.d[2], 6); /* the time axis keeps its length */
  g_forward_loss(&g);
  int64_t n = ir_numel(&out->shape), frame = out->shape.d[3] * out->shape.d[4];
  double *y0 = malloc(sizeof(double) * (size_t)n);
  memcpy(y0, ir_store_get(&g.st, out)->d, sizeof(double) * (size_t)n);
  IrTensor *x = ir_store_get(&g.st, g.f->inputs.items[0]);
  double *x0 = malloc(sizeof(double) * (size_t)x->n);
  memcpy(x0, x->d, sizeof(double) * (size_t)x->n);
  int64_t T = 6, xframe = x->shape.d[3] * x->shape.d[4];
  for (int64_t t = 0; t + 1 < T; t++) {
    memcpy(x->d, x0, sizeof(double) * (size_t)x->n);
    for (int64_t bc = 0; bc < 2 * 2; bc++) /* frames after t of every sample and channel */
      for (int64_t k = (t + 1) * xframe; k < T * xframe; k++) x->d[bc * T * xframe + k] += 1.5;
    g_forward_loss(&g);
    const double *y = ir_store_get(&g.st, out)->d;
    double later = 0;
    for (int64_t bc = 0; bc < 2 * 2; bc++)
      for (int64_t s = 0; s < T; s++)
        for (int64_t k = 0; k < frame; k++) {
          int64_t i = (bc * T + s) * frame + k;
          if (s <= t)
            ck_assert_msg(y[i] == y0[i], "frame %lld changed when frames after %lld did",
                          (long long)s, (long long)t);
          else if (s == t + 1)
            later = fmax(later, fabs(y[i] - y0[i]));
        }
    ck_assert_msg(later > 1e-3, "frame %lld did not change with its own input", (long long)t + 1);
  }
  memcpy(x->d, x0, sizeof(double) * (size_t)x->n);
  free(x0), free(y0);
  g_autodiff(&g, &r.train);
  g_check(&g, 6);
  ck_assert_int_gt(g.checked, 10);
  fe_free(p);
  g_free(&g);
}
END_TEST

/* Moved to IR text: a forward without a scalar loss gets no @train
 * (tests/passes/autodiff/no_loss.mmir); a parameter the loss does not read
 * gets no gradient and no state (tests/passes/autodiff/unused_param.mmir). */

/* ---- optimizer steps ---- */

/* loss = sum(w * w * proj) / 2 style: grad = 2 w proj, which changes every
 * step, so the moments and bias corrections matter. */
static void quad_model(G *g, int64_t n) {
  IrValue *w = g_param(g, "w", SHP(n));
  IrValue *proj =
      ir_add_param(g->m, "proj", IR_F32, &w->shape, (IrInit){IR_INIT_NORMAL, 1, 0}, (SrcLoc){0});
  proj->frozen = true;
  IrValue *y = g_op(g, IR_OP_MUL, VS(w, w), NULL);
  y = g_op(g, IR_OP_MUL, VS(y, proj), NULL);
  IrAttrs a = {0};
  ir_attrs_set_ints(&a, IR_ATTR_AXES, INTS(0));
  ir_func_add_result(g->m, g->f, g_op(g, IR_OP_SUM, &y, 1, &a));
}

/* Three steps of @train against a plain loop of the optimizer's formulas
 * (torch.optim.AdamW / SGD, gradient clipping by the global norm). */
static void optimizer_case(const MmTrain *tr, int64_t n) {
  G g;
  g_init(&g, 9);
  quad_model(&g, n);
  ir_module_set_settings(g.m, NULL, tr);
  PassCtx cx = {.d = &g.d};
  ck_assert(pass_autodiff(g.m, &cx) && pass_optimizer(g.m, &cx));
  ck_assert_msg(ir_verify(g.m), "%s", g_diag(&g));
  assert_roundtrip(&g);
  g_fill(&g);
  IrValue *w = ir_module_param(g.m, "w"), *proj = ir_module_param(g.m, "proj");
  double p[16], m[16] = {0}, v[16] = {0}, c[16];
  ck_assert_int_le(n, 16);
  for (int64_t i = 0; i < n; i++)
    p[i] = ir_store_get(&g.st, w)->d[i], c[i] = ir_store_get(&g.st, proj)->d[i];
  IrFunc *train = ir_module_func(g.m, "train");
  double lr = 0.05;
  for (int t = 1; t <= 3; t++) {
    char err[512];
    g_copy_inputs(&g, train, lr, t);
    ck_assert_msg(ir_eval_func(g.m, train, &g.st, err, sizeof err), "%s", err);
    /* the expected step, by hand */
    double gr[16], norm = 0, scale = 1;
    for (int64_t i = 0; i < n; i++) gr[i] = 2 * p[i] * c[i], norm += gr[i] * gr[i];
    norm = sqrt(norm);
    if (tr->clip > 0 && tr->clip / (norm + 1e-6) < 1) scale = tr->clip / (norm + 1e-6);
    for (int64_t i = 0; i < n; i++) {
      double gi = gr[i] * scale;
      if (tr->optim == MM_OPT_ADAMW) {
        m[i] = tr->beta1 * m[i] + (1 - tr->beta1) * gi;
        v[i] = tr->beta2 * v[i] + (1 - tr->beta2) * gi * gi;
        double mh = m[i] / (1 - pow(tr->beta1, t)), vh = v[i] / (1 - pow(tr->beta2, t));
        p[i] = p[i] * (1 - lr * tr->weight_decay) - lr * mh / (sqrt(vh) + tr->eps);
      } else {
        gi += tr->weight_decay * p[i];
        m[i] = tr->momentum * m[i] + gi;
        p[i] -= lr * m[i];
      }
    }
    const IrTensor *pw = ir_store_get(&g.st, w);
    for (int64_t i = 0; i < n; i++)
      ck_assert_msg(fabs(pw->d[i] - p[i]) <= 1e-12 * (1 + fabs(p[i])),
                    "step %d: w[%lld] = %.15g, expected %.15g", t, (long long)i, pw->d[i], p[i]);
    const char *state = tr->optim == MM_OPT_ADAMW ? "adamw.m.w" : "sgd.momentum.w";
    const IrTensor *ms = ir_store_get(&g.st, ir_module_param(g.m, state));
    for (int64_t i = 0; i < n; i++) ck_assert(fabs(ms->d[i] - m[i]) <= 1e-12 * (1 + fabs(m[i])));
  }
  g_free(&g);
}

START_TEST(test_adamw_steps) {
  MmTrain tr = {
      .optim = MM_OPT_ADAMW, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
  optimizer_case(&tr, 5);
}
END_TEST

START_TEST(test_adamw_clipped) {
  MmTrain tr = {.optim = MM_OPT_ADAMW,
                .beta1 = 0.8,
                .beta2 = 0.99,
                .eps = 1e-3,
                .weight_decay = 0.01,
                .clip = 0.3};
  optimizer_case(&tr, 7);
}
END_TEST

START_TEST(test_sgd_steps) {
  MmTrain tr = {.optim = MM_OPT_SGD, .momentum = 0.9, .weight_decay = 0.01};
  optimizer_case(&tr, 5);
}
END_TEST

START_TEST(test_sgd_clipped) {
  MmTrain tr = {.optim = MM_OPT_SGD, .momentum = 0, .weight_decay = 0, .clip = 0.25};
  optimizer_case(&tr, 3);
}
END_TEST

/* A constant gradient g: the bias-corrected moments are exactly g and g^2,
 * so each AdamW step is p -= lr * (wd * p + g / (|g| + eps)). */
START_TEST(test_adamw_constant_gradient) {
  G g;
  g_init(&g, 3);
  IrValue *w = g_param(&g, "w", SHP(4));
  g_loss(&g, w); /* grad = proj */
  MmTrain tr = {
      .optim = MM_OPT_ADAMW, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.5};
  ir_module_set_settings(g.m, NULL, &tr);
  PassCtx cx = {.d = &g.d};
  ck_assert(pass_autodiff(g.m, &cx) && pass_optimizer(g.m, &cx));
  g_fill(&g);
  IrTensor *pw = ir_store_get(&g.st, w);
  const IrTensor *gr = ir_store_get(&g.st, ir_module_param(g.m, "proj"));
  double p[4];
  for (int i = 0; i < 4; i++) p[i] = pw->d[i];
  for (int t = 1; t <= 3; t++) {
    char err[512];
    g_copy_inputs(&g, ir_module_func(g.m, "train"), 0.01, t);
    ck_assert(ir_eval_func(g.m, ir_module_func(g.m, "train"), &g.st, err, sizeof err));
    for (int i = 0; i < 4; i++) {
      p[i] -= 0.01 * (0.5 * p[i] + gr->d[i] / (fabs(gr->d[i]) + 1e-8));
      ck_assert_msg(fabs(pw->d[i] - p[i]) < 1e-12, "step %d: %.15g vs %.15g", t, pw->d[i], p[i]);
    }
  }
  g_free(&g);
}
END_TEST

/* More than 64 gradients: grad_norm in chunks, then a norm of the norms. */
START_TEST(test_grad_norm_chunks) {
  G g;
  g_init(&g, 4);
  IrValue *acc = NULL;
  for (int i = 0; i < 70; i++) {
    char name[16];
    snprintf(name, sizeof name, "p%d", i);
    IrValue *p = g_param(&g, name, SHP(2));
    acc = acc ? g_op(&g, IR_OP_ADD, VS(acc, g_op(&g, IR_OP_MUL, VS(p, p), NULL)), NULL) : p;
  }
  g_loss(&g, acc);
  MmTrain tr = {.optim = MM_OPT_SGD, .clip = 1};
  ir_module_set_settings(g.m, NULL, &tr);
  PassCtx cx = {.d = &g.d};
  ck_assert(pass_autodiff(g.m, &cx) && pass_optimizer(g.m, &cx));
  IrFunc *train = ir_module_func(g.m, "train");
  int norms = 0;
  IrValue *top = NULL;
  for (int i = 0; i < train->nodes.len; i++) {
    IrNode *n = train->nodes.items[i];
    if (n->op == IR_OP_GRAD_NORM) norms++, top = n->out[0];
  }
  ck_assert_int_eq(norms, 3); /* 64 + 6, then the two norms */
  g_fill(&g);
  char err[512];
  g_copy_inputs(&g, train, 0, 1);
  ck_assert(ir_eval_func(g.m, train, &g.st, err, sizeof err));
  double s = 0;
  for (int i = 0; i < g.m->params.len; i++) {
    IrValue *gv = grad_of(train, g.m->params.items[i]);
    if (!gv) continue;
    const IrTensor *t = ir_store_get(&g.st, gv);
    for (int64_t k = 0; k < t->n; k++) s += t->d[k] * t->d[k];
  }
  ck_assert(fabs(ir_store_get(&g.st, top)->d[0] - sqrt(s)) < 1e-12 * sqrt(s));
  g_free(&g);
}
END_TEST

/* ---- the text form ---- */

static const char opt_text[] =
    "module @M mesh(dp = 1, cp = 1, tp = 1)\n"
    "param @w : f32[3]{dp:B, cp:B, tp:B} init(normal, 0.02)\n"
    "param @sgd.momentum.w : f32[3]{dp:B, cp:B, tp:B} role(opt) init(zeros)\n"
    "func @train(%x : f32[3]{dp:B, cp:B, tp:B}, %lr : f32[]{dp:B, cp:B, tp:B}, %step : f32[]{dp:B, "
    "cp:B, tp:B}) {\n"
    "  %0 = mul(%x, @w) : f32[3]{dp:B, cp:B, tp:B}\n"
    "  %1 = mul_scalar(%x) {value = 1} : f32[3]{dp:B, cp:B, tp:B} role(grad) grad(@w) "
    "scope(\"optimizer\")\n"
    "  %2 = grad_norm(%1) : f32[]{dp:B, cp:B, tp:B}\n"
    "  sgd(@w, %1, @sgd.momentum.w, %lr, %2) {momentum = 0.9, weight_decay = 0} scope(\"opt\") "
    "loc(\"a.mm\":1:2)\n"
    "  return %0\n"
    "}\n";

START_TEST(test_text_no_results) {
  G g;
  g_init(&g, 1);
  IrModule *m = parse_text(&g, "opt.mmir", opt_text);
  ck_assert_msg(m != NULL, "%s", g_diag(&g));
  ck_assert(ir_verify(m));
  IrFunc *f = ir_module_func(m, "train");
  IrNode *n = f->nodes.items[3];
  ck_assert_int_eq(n->op, IR_OP_SGD);
  ck_assert_int_eq(n->nout, 0);
  ck_assert(ir_ops[n->op].flags & OPF_INPLACE);
  ck_assert(IR_OP_WRITES(n->op, 0) && !IR_OP_WRITES(n->op, 1) && IR_OP_WRITES(n->op, 2));
  IrNode *gn = f->nodes.items[1];
  ck_assert_ptr_eq(gn->out[0]->grad_of, ir_module_param(m, "w"));
  char *s = print_str(m);
  ck_assert_ptr_nonnull(
      strstr(s, "\n  sgd(@w, %1, @sgd.momentum.w, %lr, %2) {weight_decay = 0, momentum = 0.9} "
                "scope(\"opt\") loc(\"a.mm\":1:2)\n"));
  ck_assert_ptr_nonnull(strstr(s, "role(grad) grad(@w) scope(\"optimizer\")\n"));
  ir_module_free(m);
  /* the printed form parses back to itself */
  m = parse_text(&g, "opt2.mmir", s);
  ck_assert(m != NULL);
  char *s2 = print_str(m);
  ck_assert_str_eq(s, s2);
  free(s);
  free(s2);
  ir_module_free(m);
  g_free(&g);
}
END_TEST

/* opt_text with `from` replaced by `to` (and from2 by to2 when given),
 * parsed and verified when it parses; the Diag must show `msg`. */
static void expect_text_error2(const char *from, const char *to, const char *from2, const char *to2,
                               const char *msg) {
  G g;
  g_init(&g, 1);
  char text[4096], text2[4096];
  const char *at = strstr(opt_text, from);
  ck_assert_ptr_nonnull(at);
  snprintf(text2, sizeof text2, "%.*s%s%s", (int)(at - opt_text), opt_text, to, at + strlen(from));
  if (from2) {
    at = strstr(text2, from2);
    ck_assert_ptr_nonnull(at);
    snprintf(text, sizeof text, "%.*s%s%s", (int)(at - text2), text2, to2, at + strlen(from2));
  } else {
    memcpy(text, text2, sizeof text);
  }
  IrModule *m = parse_text(&g, "bad.mmir", text);
  if (m) ck_assert(!ir_verify(m));
  ck_assert_msg(strstr(g_diag(&g), msg), "want '%s' in:\n%s", msg, g_diag(&g));
  ir_module_free(m);
  g_free(&g);
}

static void expect_text_error(const char *from, const char *to, const char *msg) {
  expect_text_error2(from, to, NULL, NULL, msg);
}

START_TEST(test_text_errors) {
  expect_text_error("  sgd(@w", "  %9 = sgd(@w", "sgd has 0 results, but 1 is named");
  expect_text_error("{momentum = 0.9, weight_decay = 0} scope(\"opt\")",
                    "{momentum = 0.9, weight_decay = 0} : f32[3] scope(\"opt\")",
                    "sgd has no results, so no types follow it");
  expect_text_error("  %2 = grad_norm(%1)", "  grad_norm(%1)",
                    "grad_norm has 1 result, but 0 are named");
  expect_text_error("  %0 = mul(%x", "  %0, mul(%x", "expected a result name %N, found 'mul'");
  expect_text_error("grad(@w) scope", "grad(@nope) scope", "gradient of undefined parameter @nope");
  expect_text_error("role(grad) grad(@w)", "grad(@w)",
                    "a gradient of @w must have role grad, not act");
  expect_text_error2("grad(@w) scope", "grad(@b) scope",
                     "param @w :", "param @b : f32[2] init(zeros)\nparam @w :",
                     "type f32[3] differs from its parameter @b, f32[2]");
  expect_text_error("grad(@w) scope", "grad(@sgd.momentum.w) scope",
                    "@sgd.momentum.w has role opt; only params have gradients");
  expect_text_error("sgd(@w, %1, @sgd.momentum.w", "sgd(@w, %1, %x",
                    "operand 2 (%x) is updated in place, so it must be a parameter");
  expect_text_error(
      "  %2 = grad_norm(",
      "  %9 = mul_scalar(%x) {value = 2} : f32[3] role(grad) grad(@w)\n  %2 = grad_norm(",
      "@w already has a gradient here");
}
END_TEST

static Suite *train_suite(void) {
  Suite *s = suite_create("train");
  TCase *tc = tcase_create("model");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_model_gradients);
  tcase_add_test(tc, test_model_optimizer);
  tcase_add_test(tc, test_pipeline_preserves_train);
  suite_add_tcase(s, tc);
  tc = tcase_create("autodiff");
  tcase_add_test(tc, test_no_rule_error);
  tcase_add_test(tc, test_causal_conv3d);
  suite_add_tcase(s, tc);
  tc = tcase_create("optimizer");
  tcase_add_test(tc, test_adamw_steps);
  tcase_add_test(tc, test_adamw_clipped);
  tcase_add_test(tc, test_sgd_steps);
  tcase_add_test(tc, test_sgd_clipped);
  tcase_add_test(tc, test_adamw_constant_gradient);
  tcase_add_test(tc, test_grad_norm_chunks);
  suite_add_tcase(s, tc);
  tc = tcase_create("text");
  tcase_add_test(tc, test_text_no_results);
  tcase_add_test(tc, test_text_errors);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(train_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
