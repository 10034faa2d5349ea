/* mmrt_threads.h: the OpenMP thread count and wait policy the program
 * chooses (mmrt_threads.c says how). */
#ifndef MMRT_THREADS_H
#define MMRT_THREADS_H

#include <stddef.h>

/* GOMP_SPINCOUNT of the default wait: rounds a waiting thread spins before
 * it sleeps (libgomp counts about 100000 a millisecond) */
#define MMRT_SPIN_DEFAULT 30000

enum { MMRT_WAIT_PASSIVE, MMRT_WAIT_ACTIVE, MMRT_WAIT_SPIN };

typedef struct MmrtOmp {
  int chosen;               /* 0: the runtime is not linked into the program */
  int threads, wait;        /* OMP_NUM_THREADS, MMRT_WAIT_* */
  long long spin;           /* GOMP_SPINCOUNT under MMRT_WAIT_SPIN */
  int cpus, ranks;          /* CPUs this process may use, ranks on this node */
  double load;              /* 1-minute load average at start (-1: unknown), not used */
  const char *threads_from; /* "--threads", "OMP_NUM_THREADS", "default" */
  const char *wait_from;    /* "--omp-wait", "OMP_WAIT_POLICY", "default" */
} MmrtOmp;

/* Choose (first thing in main: may execute the program again). */
void mmrt_omp_setup(int argc, char **argv);

const MmrtOmp *mmrt_omp(void);

/* "2 threads (default; 2 CPUs), OpenMP waits spin 30000 rounds, then sleep (default)" */
void mmrt_omp_describe(char *buf, size_t n);

#endif /* MMRT_THREADS_H */
