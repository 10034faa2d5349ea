/* mmrt_threads.h: the OpenMP thread count and wait policy the program
 * chooses (mmrt_threads.c says how). */
#ifndef MMRT_THREADS_H
#define MMRT_THREADS_H

#include <stddef.h>

typedef struct MmrtOmp {
  int chosen;               /* 0: the runtime is not linked into the program */
  int threads, active;      /* OMP_NUM_THREADS, OMP_WAIT_POLICY=active */
  int cpus, ranks;          /* CPUs this process may use, ranks on this node */
  double load;              /* 1-minute load average at start (-1: unknown) */
  const char *threads_from; /* "--threads", "OMP_NUM_THREADS", "default", "idle CPUs" */
  const char *wait_from;    /* "--omp-wait", "OMP_WAIT_POLICY", "default", "busy machine" */
} MmrtOmp;

/* Choose (first thing in main: may execute the program again). */
void mmrt_omp_setup(int argc, char **argv);

const MmrtOmp *mmrt_omp(void);

/* "2 threads (default; 2 CPUs, load 0.1), OpenMP waits actively (default)" */
void mmrt_omp_describe(char *buf, size_t n);

#endif /* MMRT_THREADS_H */
