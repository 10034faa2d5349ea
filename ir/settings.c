/* settings.def as data (settings.h): the rows, their defaults, and the two
 * pieces of vocabulary more than one stage reads (recompute policies, the
 * schedule's arithmetic). */
#include "settings.h"
#include "../support/mesh_axes.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const mm_schedule_names[] = {MM_SCHEDULE_VALUES(MM_ENUM_NAME) NULL};
const char *const mm_cp_kind_names[] = {MM_CP_KIND_VALUES(MM_ENUM_NAME) NULL};
const char *const mm_recompute_names[] = {MM_RECOMPUTE_VALUES(MM_ENUM_NAME) NULL};
const char *const mm_optim_names[] = {MM_OPTIM_VALUES(MM_ENUM_NAME) NULL};
const char *const mm_precision_names[] = {MM_PRECISION_VALUES(MM_ENUM_NAME) NULL};
const char *const mm_lr_sched_names[] = {MM_LR_SCHED_VALUES(MM_ENUM_NAME) NULL};
const char *const mm_placement_names[] = {MM_PLACEMENT_VALUES(MM_ENUM_NAME) NULL};
const char *const mm_too_long_names[] = {MM_TOO_LONG_VALUES(MM_ENUM_NAME) NULL};
const char *const mm_bad_samples_names[] = {MM_BAD_SAMPLES_VALUES(MM_ENUM_NAME) NULL};
const char *const mm_chat_names[] = {MM_CHAT_VALUES(MM_ENUM_NAME) NULL};
const char *const mm_data_format_names[] = {"auto",
#define DATA_FORMAT(ID, NAME, ...) NAME,
#include "data_formats.def"
                                            NULL};

_Static_assert(sizeof(MmSchedule) == sizeof(int) && sizeof(MmCpKind) == sizeof(int) &&
                   sizeof(MmRecompute) == sizeof(int) && sizeof(MmOptim) == sizeof(int) &&
                   sizeof(MmLrSched) == sizeof(int) && sizeof(MmPrecision) == sizeof(int) &&
                   sizeof(MmTooLong) == sizeof(int) && sizeof(MmPlacement) == sizeof(int) &&
                   sizeof(MmBadSamples) == sizeof(int) && sizeof(MmDataFormat) == sizeof(int),
               "settings enums are read as int");
_Static_assert(sizeof(MmChat) == sizeof(int), "the chat enum is read as int");

#define MM_COUNT_OFF_INT(S, F)    0
#define MM_COUNT_OFF_BOOL(S, F)   0
#define MM_COUNT_OFF_FLOAT(S, F)  0
#define MM_COUNT_OFF_ENUM(S, F)   0
#define MM_COUNT_OFF_LOC(S, F)    0
#define MM_COUNT_OFF_SUB(S, F)    0
#define MM_COUNT_OFF_STR(S, F)    0
#define MM_COUNT_OFF_STRS(S, F)   offsetof(S, F)
#define MM_COUNT_OFF_STAGES(S, F) offsetof(S, F)
#define ROW(OWN, S, P, NP, ID, KIND, CTYPE, FIELD, NAME, NAMES, DEF, LO, HI, KEY, FLAG, WHAT,      \
            HELP)                                                                                  \
  [MM_SET_##ID] = {MM_SET_##ID,                                                                    \
                   OWN,                                                                            \
                   IR_SK_##KIND,                                                                   \
                   #FIELD,                                                                         \
                   NAME,                                                                           \
                   offsetof(S, P FIELD),                                                           \
                   MM_COUNT_OFF_##KIND(S, NP##FIELD),                                              \
                   NAMES,                                                                          \
                   (double)(DEF),                                                                  \
                   LO,                                                                             \
                   HI,                                                                             \
                   KEY,                                                                            \
                   FLAG,                                                                           \
                   WHAT,                                                                           \
                   HELP},
/* the IrModule rows: the module's own fields (ir.h) */
typedef struct ModFields {
  bool no_fuse, inference;
} ModFields;

const MmSetDesc mm_settings[MM_SET_COUNT] = {
#define SET_PLAN(...)      ROW(MM_OWN_PLAN, MmPlan, , n, __VA_ARGS__)
#define SET_PLAN_MOD(...)  ROW(MM_OWN_PLAN_MOD, ModFields, , n, __VA_ARGS__)
#define SET_TRAIN(...)     ROW(MM_OWN_TRAIN, MmTrain, , n, __VA_ARGS__)
#define SET_LORA(...)      ROW(MM_OWN_LORA, MmTrain, lora., lora.n, __VA_ARGS__)
#define SET_GAN(...)       ROW(MM_OWN_GAN, MmTrain, gan., gan.n, __VA_ARGS__)
#define SET_TRAIN_MOD(...) ROW(MM_OWN_TRAIN_MOD, ModFields, , n, __VA_ARGS__)
#define SET_DATA(...)      ROW(MM_OWN_DATA, MmTrain, data., data.n, __VA_ARGS__)
#include "settings.def"
};

void *mm_setting_base(const MmSetDesc *s, MmPlan *plan, MmTrain *train) {
  switch (s->owner) {
    case MM_OWN_PLAN: return plan;
    case MM_OWN_TRAIN:
    case MM_OWN_LORA:
    case MM_OWN_GAN:
    case MM_OWN_DATA: return train;
    default: return NULL;
  }
}

double mm_setting_get(const MmSetDesc *s, const void *base) {
  const char *at = (const char *)base + s->off;
  switch (s->kind) {
    case IR_SK_INT:
    case IR_SK_ENUM: return *(const int *)at;
    case IR_SK_BOOL: return *(const bool *)at;
    case IR_SK_FLOAT: return *(const double *)at;
    default: return 0;
  }
}

void mm_setting_put(const MmSetDesc *s, void *base, double v) {
  char *at = (char *)base + s->off;
  switch (s->kind) {
    case IR_SK_INT:
    case IR_SK_ENUM: *(int *)at = (int)v; break;
    case IR_SK_BOOL: *(bool *)at = v != 0; break;
    case IR_SK_FLOAT: *(double *)at = v; break;
    default: break;
  }
}

void mm_settings_default(MmPlan *plan, MmTrain *train) {
  memset(plan, 0, sizeof *plan);
  memset(train, 0, sizeof *train);
  for (int i = 0; i < MM_SET_COUNT; i++) {
    void *base = mm_setting_base(&mm_settings[i], plan, train);
    if (base) mm_setting_put(&mm_settings[i], base, mm_settings[i].def);
  }
}

int mm_enum_index(const char *const *names, const char *name) {
  for (int i = 0; names && names[i]; i++)
    if (strcmp(names[i], name) == 0) return i;
  return -1;
}

const char *mm_enum_list(const char *const *names, char *buf, size_t n) {
  size_t len = 0;
  buf[0] = 0;
  for (int i = 0; names[i]; i++)
    len += (size_t)snprintf(buf + len, len < n ? n - len : 0, "%s%s",
                            i == 0         ? ""
                            : names[i + 1] ? ", "
                                           : " or ",
                            names[i]);
  return buf;
}

bool mm_recompute_parse(const char *s, MmRecompute *pol, int *block) {
  if (strncmp(s, "block:", 6) == 0) {
    char *end;
    long n = strtol(s + 6, &end, 10);
    if (end == s + 6 || *end || n < 1 || n > 1 << 20) return false;
    *pol = MM_RECOMPUTE_BLOCK;
    *block = (int)n;
    return true;
  }
  int k = mm_enum_index(mm_recompute_names, s);
  if (k < 0 || k == MM_RECOMPUTE_BLOCK) return false;
  *pol = (MmRecompute)k;
  *block = 0;
  return true;
}

static bool fail(char *err, size_t errn, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (err && errn) vsnprintf(err, errn, fmt, ap);
  va_end(ap);
  return false;
}

int mm_schedule_parse(const char *name) {
  for (int k = 0; mm_schedule_names[k]; k++)
    if (strcmp(name, mm_schedule_names[k]) == 0) return k;
  return -1;
}

bool mm_schedule_check(MmSchedule k, int p, int v, int m, char *err, size_t errn) {
  if ((unsigned)k >= MM_SCHED_COUNT) return fail(err, errn, "unknown pipeline schedule");
  const char *name = mm_schedule_names[k];
  if (p < 1) return fail(err, errn, "pp must be at least 1, not %d", p);
  if (m < 1) return fail(err, errn, "micro_batches must be at least 1, not %d", m);
  if (v < 1) return fail(err, errn, "vpp must be at least 1, not %d", v);
  if (v > 1 && k != MM_SCHED_INTERLEAVED)
    return fail(err, errn, "vpp = %d needs schedule = interleaved (%s has one stage per rank)", v,
                name);
  if (k != MM_SCHED_GPIPE && m < p)
    return fail(err, errn,
                "schedule %s needs at least as many micro-batches as stages: micro_batches = "
                "%d < pp = %d",
                name, m, p);
  if (k == MM_SCHED_INTERLEAVED && m % p != 0)
    return fail(err, errn,
                "schedule interleaved needs micro_batches to be a multiple of pp: %d is not a "
                "multiple of %d",
                m, p);
  if ((int64_t)p * v * m > 1 << 22)
    return fail(err, errn, "pipeline schedule too large (pp·vpp·micro_batches = %lld)",
                (long long)p * v * m);
  return true;
}

void mm_plan_mesh(const MmPlan *pl, int *size) {
#define MESH_AXIS(ID, name, nest, ir) size[MESH_##ID] = pl->name;
#include "../support/mesh_axes.def"
}

int64_t mm_plan_ranks(const MmPlan *pl) {
  int size[MESH_NAXES];
  mm_plan_mesh(pl, size);
  return mesh_product(size, MESH_NAXES);
}

void mm_plan_flags_init(MmPlanFlags *f) {
  memset(f, 0, sizeof *f);
  mm_settings_default(&f->plan, &f->train);
}

bool mm_subplan_parse(const char *text, MmSubPlan *out) {
  const char *colon = text ? strchr(text, ':') : NULL;
  if (!colon || colon == text) return false;
  int tp = 0, dp = 0, sp = -1, used = 0;
  if (sscanf(colon + 1, "tp=%d,dp=%d,sp=%d%n", &tp, &dp, &sp, &used) != 3 || colon[1 + used] ||
      tp < 1 || dp < 1 || (sp != 0 && sp != 1))
    return false;
  *out = (MmSubPlan){text, (int)(colon - text), tp, dp, sp == 1};
  return true;
}

bool mm_subplan_for(const MmPlan *pl, const char *path, MmSubPlan *out) {
  for (int i = 0; path && i < pl->nsubplans; i++) {
    MmSubPlan s;
    if (!mm_subplan_parse(pl->subplans[i], &s)) continue;
    size_t n = (size_t)s.namelen;
    if (strncmp(path, s.name, n) == 0 && (path[n] == '.' || path[n] == '\0')) {
      *out = s;
      return true;
    }
  }
  return false;
}

bool mm_subplan_one_rank(const MmPlan *pl, const MmSubPlan *sub) {
  MmSubPlan first;
  return pl->placement == MM_PLACE_SEPARATE && pl->nsubplans == 2 && pl->pp == 2 && pl->tp > 1 &&
         pl->dp == 1 && mm_subplan_parse(pl->subplans[0], &first) &&
         first.namelen == sub->namelen && !strncmp(first.name, sub->name, (size_t)sub->namelen) &&
         sub->tp == 1 && sub->dp == 1;
}
