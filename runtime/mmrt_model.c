/* mmrt_model.c: lookups in the model descriptor (mmrt_main.h) that the
 * trainer, its tasks and the generator share. */
#include <string.h>

#include "mmrt_main.h"

const MmrtTensorDesc *mmrt_desc_input(const MmrtModelDesc *m, const char *name) {
  for (int64_t i = 0; i < m->ninputs; i++)
    if (!strcmp(m->inputs[i].name, name)) return &m->inputs[i];
  return NULL;
}

int mmrt_is_adapter(const char *name) {
  size_t n = strlen(name);
  return n > 7 && (!strcmp(name + n - 7, ".lora_a") || !strcmp(name + n - 7, ".lora_b"));
}
