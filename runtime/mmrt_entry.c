/* mmrt_entry.c: main() of every executable mmc links.
 *
 * It checks that the generated object was built for this runtime's ABI and
 * hands over by the descriptor's task: to the trainer (mmrt_main.c) or to
 * the generator/evaluator (mmrt_generate.c). Neither of those calls into
 * the other; what both need of the descriptor is in mmrt_model.c. */
#include <stdio.h>

#include "mmrt_main.h"

int mmrt_main(int argc, char **argv, const MmrtModelDesc *m) {
  if (m->abi_version != MMRT_ABI_VERSION) {
    fprintf(stderr,
            "trainer: error: the model was compiled for runtime ABI %lld, this runtime is %d; "
            "recompile it\n",
            (long long)m->abi_version, MMRT_ABI_VERSION);
    return 1;
  }
  return m->task == MMRT_TASK_TRAIN ? mmrt_train_main(argc, argv, m)
                                    : mmrt_generate_main(argc, argv, m);
}

int main(int argc, char **argv) {
  return mmrt_main(argc, argv, &mm_model);
}
