/* mmrt_entry.c: main() of every executable mmc links.
 *
 * It checks that the generated object was built for this runtime's ABI and
 * that a launcher (mpirun) started as many ranks as the model was compiled
 * for, then hands over by the descriptor's task: to the trainer
 * (mmrt_main.c), to the generator/evaluator (mmrt_generate.c) or to the
 * reconstructor (mmrt_reconstruct.c), to the sampler (mmrt_sample.c) or to
 * the feature extractor (mmrt_extract.c). None of those calls into another;
 * what they share of the descriptor is in mmrt_model.c. */
#include <stdio.h>

#include "mmrt_comm.h"
#include "mmrt_main.h"
#include "mmrt_threads.h"

int mmrt_main(int argc, char **argv, const MmrtModelDesc *m) {
  if (m->abi_version != MMRT_ABI_VERSION) {
    fprintf(stderr,
            "trainer: error: the model was compiled for runtime ABI %lld, this runtime is %d; "
            "recompile it\n",
            (long long)m->abi_version, MMRT_ABI_VERSION);
    return 1;
  }
  /* the OpenMP thread count and wait policy (may run the program again) */
  mmrt_omp_setup(argc, argv);
  /* the world a launcher started, before any file is touched: a one-rank
   * trainer under mpirun -np 2 would otherwise run twice over the same log
   * and checkpoint (a multi-rank one started without a launcher is caught
   * by mmrt_mesh_init, which sees a world of 1); the extractor takes any
   * world (each rank a share of the clips) */
  const char *who = m->task == MMRT_TASK_TRAIN         ? "trainer"
                    : m->task == MMRT_TASK_GENERATE    ? "generator"
                    : m->task == MMRT_TASK_RECONSTRUCT ? "reconstructor"
                    : m->task == MMRT_TASK_SAMPLE      ? "sampler"
                    : m->task == MMRT_TASK_EXTRACT     ? "extractor"
                                                       : "evaluator";
  char err[512];
  int rank;
  if (m->task != MMRT_TASK_EXTRACT && mmrt_launcher_world(&rank) > 0 &&
      mmrt_world_check(who, (int)m->mesh[MMRT_DESC_AXIS_DP], (int)m->mesh[MMRT_DESC_AXIS_CP],
                       (int)m->mesh[MMRT_DESC_AXIS_TP], m->pp > 1 ? (int)m->pp : 1, err,
                       sizeof err) != MMRT_OK) {
    fprintf(stderr, "%s (rank %d): error: %s\n", who, rank, err);
    return 1;
  }
  return m->task == MMRT_TASK_TRAIN         ? mmrt_train_main(argc, argv, m)
         : m->task == MMRT_TASK_RECONSTRUCT ? mmrt_reconstruct_main(argc, argv, m)
         : m->task == MMRT_TASK_SAMPLE      ? mmrt_sample_main(argc, argv, m)
         : m->task == MMRT_TASK_EXTRACT     ? mmrt_extract_main(argc, argv, m)
                                            : mmrt_generate_main(argc, argv, m);
}

int main(int argc, char **argv) {
  return mmrt_main(argc, argv, &mm_model);
}
