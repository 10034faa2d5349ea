/* The fields of a module's settings as the text form writes them (internal
 * to ir/: the printer and the parser read the same table).
 *
 *   plan(tp = 2, sp = true, bucket_mb = 0)
 *   train(optimizer = sgd, lr = 0.1, freeze = ["vision"],
 *         lora = lora(rank = 8, alpha = 16, modules = ["llm.q_proj"], loc("m.mm":3:5)))
 *   passes(verify, lora, autodiff)
 *
 * A field equal to its default (ir_settings_default) is left out, a line
 * with no field too. The fields are settings.def's rows (IrSetKind: settings.h). */
#ifndef MM_IR_IR_SETTINGS_H
#define MM_IR_IR_SETTINGS_H

#include "ir.h"

typedef struct IrSetting {
  const char *name;
  IrSetKind kind;
  size_t off;                  /* from the start of the IrModule */
  size_t count_off;            /* STRS, STAGES */
  const char *const *names;    /* ENUM, NULL-terminated */
  double lo, hi;               /* INT, FLOAT */
  const struct IrSetting *sub; /* SUB: its fields, ended by a NULL name */
} IrSetting;

/* The lines in print order, each a NULL-name-terminated field list. */
typedef struct IrSetLine {
  const char *name;
  const IrSetting *fields;
} IrSetLine;
extern const IrSetLine ir_set_lines[];
extern const int ir_set_nlines;

/* Whether field f of m holds its default. */
bool ir_setting_is_default(const IrModule *m, const IrSetting *f);

#endif
