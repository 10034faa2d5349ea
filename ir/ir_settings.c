/* The settings a module carries (IrModule.plan, .train, .inference,
 * .no_fuse, .passes_run): the defaults, a deep copy into the module's arena
 * and the record of the passes that have run. The text form prints only what
 * differs from the defaults (ir_print.c) and the parser starts from them. */
#include <stddef.h>
#include <string.h>

#include "ir_settings.h"

void ir_settings_default(MmPlan *plan, MmTrain *train) {
  memset(plan, 0, sizeof *plan);
  plan->tp = plan->pp = plan->cp = plan->dp = plan->micro_batches = plan->vpp = 1;
  plan->bucket_mb = MM_BUCKET_MB_DEFAULT;
  memset(train, 0, sizeof *train);
  train->optim = MM_OPT_ADAMW;
  train->lr = 1e-3;
  train->beta1 = 0.9;
  train->beta2 = 0.999;
  train->eps = 1e-8;
}

static const char **copy_strs(Arena *a, const char *const *v, int n) {
  if (!v || n <= 0) return NULL;
  const char **out = ARENA_ARRAY(a, const char *, n);
  for (int i = 0; i < n; i++) out[i] = arena_strdup(a, v[i] ? v[i] : "");
  return out;
}

void ir_module_set_settings(IrModule *m, const MmPlan *plan, const MmTrain *train) {
  Arena *a = &m->arena;
  if (plan) {
    m->plan = *plan;
    if (plan->stages && plan->nstages > 0) {
      m->plan.stages = ARENA_ARRAY(a, MmStage, plan->nstages);
      for (int i = 0; i < plan->nstages; i++) {
        m->plan.stages[i].nunits = plan->stages[i].nunits;
        m->plan.stages[i].units = copy_strs(a, plan->stages[i].units, plan->stages[i].nunits);
      }
    } else {
      m->plan.stages = NULL;
      m->plan.nstages = 0;
    }
    m->plan.recompute_by = copy_strs(a, plan->recompute_by, plan->nrecompute_by);
    m->plan.recompute_by_loc = NULL;
  }
  if (train) {
    m->train = *train;
    m->train.freeze = copy_strs(a, train->freeze, train->nfreeze);
    MmLora *l = &m->train.lora;
    l->targets = copy_strs(a, train->lora.targets, train->lora.ntargets);
    l->layers = copy_strs(a, train->lora.layers, train->lora.nlayers);
    l->modules = copy_strs(a, train->lora.modules, train->lora.nmodules);
    m->train.gan.disc = copy_strs(a, train->gan.disc, train->gan.ndisc);
  }
}

bool ir_module_ran(const IrModule *m, const char *pass) {
  for (int i = 0; i < m->passes_run.len; i++)
    if (strcmp(m->passes_run.items[i], pass) == 0) return true;
  return false;
}

void ir_module_mark_ran(IrModule *m, const char *pass) {
  if (!ir_module_ran(m, pass))
    ptrvec_push(&m->arena, &m->passes_run, arena_strdup(&m->arena, pass));
}

/* ---- the fields as the text form writes them (ir_settings.h) ---- */

_Static_assert(sizeof(MmSchedule) == sizeof(int) && sizeof(MmCpKind) == sizeof(int) &&
                   sizeof(MmRecompute) == sizeof(int) && sizeof(MmOptim) == sizeof(int) &&
                   sizeof(MmLrSched) == sizeof(int) && sizeof(MmPrecision) == sizeof(int),
               "settings enums are read as int");

const char *const ir_sched_names[] = {[MM_SCHED_1F1B] = "1f1b",
                                      [MM_SCHED_GPIPE] = "gpipe",
                                      [MM_SCHED_INTERLEAVED] = "interleaved",
                                      [MM_SCHED_ZBH1] = "zbh1",
                                      NULL};

int ir_sched_parse(const char *name) {
  for (int k = 0; ir_sched_names[k]; k++)
    if (strcmp(name, ir_sched_names[k]) == 0) return k;
  return -1;
}
static const char *const recompute_names[] = {"none", "selective", "full", "block", NULL};
static const char *const cp_kind_names[] = {"ulysses", "ring", NULL};
static const char *const optim_names[] = {"adamw", "sgd", NULL};
static const char *const lr_sched_names[] = {"constant", "cosine", "linear", NULL};
static const char *const precision_names[] = {"fp32", "bf16", NULL};

#define OFF(f)            offsetof(IrModule, f)
#define INT(n, f, lo, hi) {n, IR_SK_INT, OFF(f), 0, NULL, lo, hi, NULL}
#define FLT(n, f, lo, hi) {n, IR_SK_FLOAT, OFF(f), 0, NULL, lo, hi, NULL}
#define BOOL(n, f)        {n, IR_SK_BOOL, OFF(f), 0, NULL, 0, 0, NULL}
#define ENUM(n, f, names) {n, IR_SK_ENUM, OFF(f), 0, names, 0, 0, NULL}
#define STRS(n, f, cnt)   {n, IR_SK_STRS, OFF(f), OFF(cnt), NULL, 0, 0, NULL}
#define END               {NULL, IR_SK_INT, 0, 0, NULL, 0, 0, NULL}
#define MAXN              (1 << 20)

static const IrSetting plan_fields[] = {
    INT("tp", plan.tp, 1, MAXN),
    INT("pp", plan.pp, 1, MAXN),
    INT("cp", plan.cp, 1, MAXN),
    INT("dp", plan.dp, 1, MAXN),
    ENUM("cp_kind", plan.cp_kind, cp_kind_names),
    INT("cp_ulysses", plan.cp_ulysses, 0, MAXN),
    BOOL("sp", plan.sp),
    INT("zero", plan.zero, 0, 3),
    INT("micro_batches", plan.micro_batches, 1, MAXN),
    INT("vpp", plan.vpp, 1, MAXN),
    ENUM("schedule", plan.schedule, ir_sched_names),
    ENUM("recompute", plan.recompute, recompute_names),
    INT("recompute_block", plan.recompute_block, 0, MAXN),
    STRS("recompute_by", plan.recompute_by, plan.nrecompute_by),
    {"stages", IR_SK_STAGES, OFF(plan.stages), OFF(plan.nstages), NULL, 0, 0, NULL},
    FLT("bucket_mb", plan.bucket_mb, 0, MAXN),
    BOOL("no_overlap", plan.no_overlap),
    BOOL("no_fuse", no_fuse),
    END,
};

static const IrSetting lora_fields[] = {
    INT("rank", train.lora.rank, 0, MAXN),
    FLT("alpha", train.lora.alpha, 0, 1e300),
    STRS("targets", train.lora.targets, train.lora.ntargets),
    STRS("layers", train.lora.layers, train.lora.nlayers),
    STRS("modules", train.lora.modules, train.lora.nmodules),
    {"loc", IR_SK_LOC, OFF(train.lora.loc), 0, NULL, 0, 0, NULL},
    END,
};

static const IrSetting gan_fields[] = {
    STRS("discriminator", train.gan.disc, train.gan.ndisc),
    FLT("weight", train.gan.weight, 0, 1e300),
    INT("start", train.gan.start, 0, INT32_MAX),
    {"loc", IR_SK_LOC, OFF(train.gan.loc), 0, NULL, 0, 0, NULL},
    END,
};

static const IrSetting train_fields[] = {
    ENUM("optimizer", train.optim, optim_names),
    FLT("lr", train.lr, 0, 1e300),
    FLT("beta1", train.beta1, 0, 1),
    FLT("beta2", train.beta2, 0, 1),
    FLT("eps", train.eps, 0, 1e300),
    FLT("weight_decay", train.weight_decay, 0, 1e300),
    FLT("momentum", train.momentum, 0, 1e300),
    FLT("clip", train.clip, 0, 1e300),
    ENUM("lr_schedule", train.lr_sched, lr_sched_names),
    INT("warmup", train.warmup, 0, INT32_MAX),
    FLT("min_lr", train.min_lr, 0, 1e300),
    INT("steps", train.steps, 0, INT32_MAX),
    INT("batch", train.batch, 0, INT32_MAX),
    STRS("freeze", train.freeze, train.nfreeze),
    {"lora", IR_SK_SUB, 0, 0, NULL, 0, 0, lora_fields},
    ENUM("precision", train.precision, precision_names),
    {"gan", IR_SK_SUB, 0, 0, NULL, 0, 0, gan_fields},
    BOOL("inference", inference),
    END,
};

const IrSetLine ir_set_lines[] = {{"plan", plan_fields}, {"train", train_fields}};
const int ir_set_nlines = (int)(sizeof ir_set_lines / sizeof ir_set_lines[0]);

static const IrModule *defaults(void) {
  static IrModule d;
  static bool init;
  if (!init) {
    ir_settings_default(&d.plan, &d.train);
    init = true;
  }
  return &d;
}

bool ir_setting_is_default(const IrModule *m, const IrSetting *f) {
  const char *a = (const char *)m + f->off, *b = (const char *)defaults() + f->off;
  switch (f->kind) {
    case IR_SK_INT:
    case IR_SK_ENUM: return *(const int *)a == *(const int *)b;
    case IR_SK_BOOL: return *(const bool *)a == *(const bool *)b;
    case IR_SK_FLOAT: return *(const double *)a == *(const double *)b;
    case IR_SK_STRS:
    case IR_SK_STAGES: return *(const int *)((const char *)m + f->count_off) == 0;
    case IR_SK_LOC: return ((const SrcLoc *)a)->file == 0;
    case IR_SK_SUB:
      for (const IrSetting *s = f->sub; s->name; s++)
        if (!ir_setting_is_default(m, s)) return false;
      return true;
  }
  return true;
}
