/* mmrt_programs.c: the table of programs, a row each of
 * model/mmrt_programs.def, by task (mmrt_main.h mmrt_program). Apart from
 * mmrt_entry.c so that what links it has no main() of ours. */
#include <stddef.h>

#include "mmrt_main.h"

static const MmrtProgram programs[MMRT_NTASKS] = {
#define MMRT_PROGRAM(id, name_, who_, steps_, any_world_, main_, parse_)                           \
  [MMRT_TASK_##id] = {.name = name_,                                                               \
                      .who = who_,                                                                 \
                      .steps = steps_,                                                             \
                      .any_world = any_world_,                                                     \
                      .main = main_,                                                               \
                      .parse = parse_},
#include "mmrt_programs.def"
#undef MMRT_PROGRAM
};

const MmrtProgram *mmrt_program(int64_t task) {
  return task >= 0 && task < MMRT_NTASKS ? &programs[task] : NULL;
}
