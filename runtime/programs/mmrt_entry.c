/* mmrt_entry.c: main() of every executable mmc links.
 *
 * It checks that the generated object was built for this runtime's ABI,
 * that a launcher (mpirun) started as many ranks as the model was compiled
 * for, and that the model has the step functions its program runs, then
 * hands over by the descriptor's task to the program's main: the trainer
 * (mmrt_main.c), the generator/evaluator (mmrt_generate.c), the
 * reconstructor (mmrt_reconstruct.c), the sampler (mmrt_sample.c) or the
 * feature extractor (mmrt_extract.c). None of those calls into another;
 * what they share of the descriptor is in model/mmrt_model.c. */
#include <stdio.h>
#include <string.h>

#include "mmrt_comm.h"
#include "mmrt_main.h"
#include "mmrt_threads.h"

/* The step functions the program runs, each present in the model; 0, or 1
 * after naming the one missing. */
static int has_steps(const MmrtProgram *p, const MmrtModelDesc *m) {
  for (const char *s = p->steps; *s;) {
    size_t n = strcspn(s, " ");
    char name[64];
    snprintf(name, sizeof name, "%.*s", (int)n, s);
    MmrtStepFn fn = NULL;
    if (!mmrt_desc_step(m, name, &fn) || !fn)
      return mmrt_fail(p->who,
                       "model %s has no %s, which the %s task runs (recompile it with mmc compile "
                       "--task %s)",
                       m->name, name, p->name, p->name);
    s += n + (s[n] == ' ');
  }
  return 0;
}

int mmrt_main(int argc, char **argv, const MmrtModelDesc *m) {
  if (m->abi_version != MMRT_ABI_VERSION) {
    fprintf(stderr,
            "trainer: error: the model was compiled for runtime ABI %lld, this runtime is %d; "
            "recompile it\n",
            (long long)m->abi_version, MMRT_ABI_VERSION);
    return 1;
  }
  const MmrtProgram *p = mmrt_program(m->task);
  if (!p) {
    fprintf(stderr, "trainer: error: the model's task %lld is no program of this runtime\n",
            (long long)m->task);
    return 1;
  }
  /* the OpenMP thread count and wait policy (may run the program again) */
  mmrt_omp_setup(argc, argv);
  /* the world a launcher started, before any file is touched: a one-rank
   * trainer under mpirun -np 2 would otherwise run twice over the same log
   * and checkpoint (a multi-rank one started without a launcher is caught
   * by mmrt_mesh_init, which sees a world of 1); the extractor takes any
   * world (each rank a share of the clips) */
  char err[512];
  int rank, size[MESH_NAXES];
  mmrt_desc_mesh(m, size);
  if (!p->any_world && !m->pp_one0 && mmrt_launcher_world(&rank) > 0 &&
      mmrt_world_check(p->who, size, err, sizeof err) != MMRT_OK) {
    fprintf(stderr, "%s (rank %d): error: %s\n", p->who, rank, err);
    return 1;
  }
  if (has_steps(p, m)) return 1;
  return p->main(argc, argv, m);
}

int main(int argc, char **argv) {
  return mmrt_main(argc, argv, &mm_model);
}
