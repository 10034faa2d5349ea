/* The settings a module carries (IrModule.plan, .train, .inference,
 * .no_fuse, .passes_run): the defaults, a deep copy into the module's arena
 * and the record of the passes that have run. The text form prints only what
 * differs from the defaults (ir_print.c) and the parser starts from them. */
#include <stddef.h>
#include <string.h>

#include "ir_settings.h"

void ir_settings_default(MmPlan *plan, MmTrain *train) {
  mm_settings_default(plan, train);
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
    m->plan.subplans = copy_strs(a, plan->subplans, plan->nsubplans);
    m->plan.subplan_loc = NULL;
  }
  if (train) {
    m->train = *train;
    m->train.freeze = copy_strs(a, train->freeze, train->nfreeze);
    MmLora *l = &m->train.lora;
    l->targets = copy_strs(a, train->lora.targets, train->lora.ntargets);
    l->layers = copy_strs(a, train->lora.layers, train->lora.nlayers);
    l->modules = copy_strs(a, train->lora.modules, train->lora.nmodules);
    m->train.gan.disc = copy_strs(a, train->gan.disc, train->gan.ndisc);
    for (int id = 0; id < MM_SET_COUNT; id++) /* the data section's strings */
      if (mm_settings[id].owner == MM_OWN_DATA && mm_settings[id].kind == IR_SK_STR) {
        const char **f = (const char **)((char *)&m->train + mm_settings[id].off);
        if (*f) *f = arena_strdup(a, *f);
      }
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

/* ---- the fields as the text form writes them (ir_settings.h): settings.def's rows ---- */

#define IR_CNT_INT(F)     0
#define IR_CNT_BOOL(F)    0
#define IR_CNT_FLOAT(F)   0
#define IR_CNT_ENUM(F)    0
#define IR_CNT_LOC(F)     0
#define IR_CNT_SUB(F)     0
#define IR_CNT_STR(F)     0
#define IR_SUB_STR(ID)    NULL
#define IR_CNT_STRS(F)    offsetof(IrModule, F)
#define IR_CNT_STAGES(F)  offsetof(IrModule, F)
#define IR_SUB_INT(ID)    NULL
#define IR_SUB_BOOL(ID)   NULL
#define IR_SUB_FLOAT(ID)  NULL
#define IR_SUB_ENUM(ID)   NULL
#define IR_SUB_LOC(ID)    NULL
#define IR_SUB_STRS(ID)   NULL
#define IR_SUB_STAGES(ID) NULL
#define IR_SUB_SUB(ID)    sub_##ID
#define FIELD(P, NP, ID, KIND, CTYPE, F, NAME, NAMES, DEF, LO, HI, ...)                            \
  {NAME, IR_SK_##KIND, offsetof(IrModule, P F), IR_CNT_##KIND(NP##F), NAMES,                       \
   LO,   HI,           IR_SUB_##KIND(ID)},
#define END {NULL, IR_SK_INT, 0, 0, NULL, 0, 0, NULL}

static const IrSetting sub_LORA[] = {
#define SET_LORA(...) FIELD(train.lora., train.lora.n, __VA_ARGS__)
#include "settings.def"
    END,
};
static const IrSetting sub_GAN[] = {
#define SET_GAN(...) FIELD(train.gan., train.gan.n, __VA_ARGS__)
#include "settings.def"
    END,
};
static const IrSetting plan_fields[] = {
#define SET_PLAN(...)     FIELD(plan., plan.n, __VA_ARGS__)
#define SET_PLAN_MOD(...) FIELD(, n, __VA_ARGS__)
#include "settings.def"
    END,
};
static const IrSetting train_fields[] = {
#define SET_TRAIN(...)     FIELD(train., train.n, __VA_ARGS__)
#define SET_TRAIN_MOD(...) FIELD(, n, __VA_ARGS__)
#include "settings.def"
    END,
};

static const IrSetting data_fields[] = {
#define SET_DATA(...) FIELD(train.data., train.data.n, __VA_ARGS__)
#include "settings.def"
    END,
};

const IrSetLine ir_set_lines[] = {
    {"plan", plan_fields}, {"train", train_fields}, {"data", data_fields}};
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
    case IR_SK_STR: return *(const char *const *)a == NULL;
    case IR_SK_SUB:
      for (const IrSetting *s = f->sub; s->name; s++)
        if (!ir_setting_is_default(m, s)) return false;
      return true;
  }
  return true;
}
