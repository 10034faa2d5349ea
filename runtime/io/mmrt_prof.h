/* mmrt_prof.h: the trainer's --profile (time per op kind and per layer,
 * split by phase). The generated training step calls mmrt_prof_begin once
 * and, only when it returned 1, mmrt_prof_mark before each op and once at
 * the end (mmrt_abi.def); the time between two marks is the op's. */
#ifndef MMRT_PROF_H
#define MMRT_PROF_H

#include <stdint.h>
#include <stdio.h>

enum { MMRT_PROF_FWD, MMRT_PROF_BWD, MMRT_PROF_UPD, MMRT_PROF_COMM, MMRT_PROF_NPHASES };

/* Profile the training steps from now on, leaving out the first one (it
 * creates oneDNN's primitives). */
void mmrt_prof_enable(void);

/* The table, per profiled step: phases, op kinds, layers. */
void mmrt_prof_print(FILE *out);

#define MMRT_ABI_SECTION_PROF
#include "mmrt_abi.h"

#endif /* MMRT_PROF_H */
