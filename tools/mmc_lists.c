/* mmc_lists.c: the reference lists the docs quote (tools/mmc_lists.h). */
#include "tools/mmc_lists.h"

#include <string.h>

#include "ir/ir.h"
#include "mmc_version.h" /* made at build time by tools/version.cmake */
#include "passes/pass.h"

void mmc_list_passes(FILE *out) {
  fprintf(out, "%-12s %s\n", "lower",
          "the frontend: the .mm model elaborated into IR (dump-ir --after lower prints it)");
  for (int i = 0; i < pass_count; i++) {
    const Pass *p = &pass_list[i];
    fprintf(out, "%-12s %s", p->name, p->summary);
    if (p->requires[0]) fprintf(out, " [after %s]", p->requires);
    fprintf(out, "\n");
  }
}

/* The builtin column of ops.def (FE(handler, "signature", kind); kind 0
 * function and method, 1 function, 2 method): its signature and kind. */
typedef struct OpFe {
  const char *sig;
  int kind;
} OpFe;
#define FE(fn, sig, kind) {sig, kind}
#define NOFE              {NULL, 0}
static const OpFe op_fe[IR_OP_COUNT] = {
#define OP(N, S, MIN, MAX, NOUT, REQ, OPT, FLAGS, FLOPS, SHP, G, SHARD, E, L, F) [IR_OP_##N] = F,
#include "ir/ops.def"
#undef OP
};
#undef FE
#undef NOFE

/* "name(sig)" and/or "recv.name(rest)" for a builtin of the language. */
static void builtin_form(const char *name, const OpFe *fe, char *buf, size_t n) {
  if (!fe->sig) {
    snprintf(buf, n, "-");
    return;
  }
  const char *comma = strchr(fe->sig, ',');
  char recv[32];
  size_t rl = comma ? (size_t)(comma - fe->sig) : strlen(fe->sig);
  if (rl >= sizeof recv) rl = sizeof recv - 1;
  memcpy(recv, fe->sig, rl);
  recv[rl] = 0;
  const char *rest = comma ? comma + 2 : "";
  if (fe->kind == 1)
    snprintf(buf, n, "%s(%s)", name, fe->sig);
  else if (fe->kind == 2)
    snprintf(buf, n, "%s.%s(%s)", recv, name, rest);
  else
    snprintf(buf, n, "%s(%s), %s.%s(%s)", name, fe->sig, recv, name, rest);
}

void mmc_list_ops(FILE *out) {
  fprintf(out, "%-22s %-7s %-7s %s\n", "op", "inputs", "outputs", "builtin");
  for (int i = 0; i < IR_OP_COUNT; i++) {
    const IrOpInfo *o = &ir_ops[i];
    char in[16], form[160];
    if (o->min_in == o->max_in)
      snprintf(in, sizeof in, "%d", o->min_in);
    else
      snprintf(in, sizeof in, "%d-%d", o->min_in, o->max_in);
    builtin_form(o->name, &op_fe[i], form, sizeof form);
    fprintf(out, "%-22s %-7s %-7d %s\n", o->name, in, o->nout, form);
  }
}

void mmc_version(FILE *out) {
  if (MMC_GIT_DESCRIBE[0])
    fprintf(out, "mmc %s (git %s)\n", MMC_VERSION, MMC_GIT_DESCRIBE);
  else
    fprintf(out, "mmc %s\n", MMC_VERSION);
}
