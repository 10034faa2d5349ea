/* mmrt_threads.c: the program's OpenMP thread count and wait policy.
 *
 * libgomp reads OMP_WAIT_POLICY (and OMP_NUM_THREADS) once, in its
 * constructor, before main runs, and a setenv in the executable's
 * .preinit_array is lost (libc adopts the original environment after it).
 * So the first thing main does is choose, and when the environment does not
 * already say so, set both variables and execute the program again (once:
 * the choice and its reasons travel in MMRT_OMP_CHOICE). --threads N and
 * --omp-wait active|passive|spin (checked again, with messages, by the
 * trainer's parser) override the environment, the environment the defaults:
 *   threads: the CPUs this process may run on; when they are all the
 *            machine's (an unbound rank) shared by the ranks of this node
 *            (OMPI_COMM_WORLD_LOCAL_SIZE, MPI_LOCALNRANKS); never fewer for
 *            a loaded machine, since the count changes the order of some
 *            float sums and a run's bits must not depend on the load;
 *   waiting: spin, then sleep (OMP_WAIT_POLICY=passive with
 *            GOMP_SPINCOUNT=MMRT_SPIN_DEFAULT): a thread that finds no work
 *            spins that many rounds (a fraction of a millisecond: the gap
 *            between two kernels of a step) and then sleeps, so back-to-back
 *            kernels never pay a sleep and a wake-up (on this VM a sleeping
 *            CPU wakes slowly); passive when the machine is busy: the other
 *            tasks ready to run now (the run queue, sampled for 30 ms, not
 *            the load average of the last minute) and this node's threads
 *            are more than its CPUs, so a spinning thread would take the CPU
 *            from the thread it waits for. Measured on a 2-CPU Zen 4 VM,
 *            ms per step, alternating: with ~1 other runnable task GPT2Tiny
 *            passive 10.0, spinning 1k-100k rounds 1.3-1.7, active 1.4-4.1
 *            (ViTFashion 54-58, 36-42, 35-42); with 6-7, GPT2Tiny passive
 *            4.9-7.7, spin 300: 7.2-8.8, 1k: 12-25, 3k: 40-50 (ViTFashion
 *            73-139, 82-101, 90-159, 186-234; 30k rounds 1053, 100k 1046-2507).
 */
#include "mmrt_threads.h"

#include "mmrt_flags.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <omp.h>

static MmrtOmp g_omp;

static int positive(const char *s) {
  char *end;
  long v = s && *s ? strtol(s, &end, 10) : 0;
  return s && *s && !*end && v >= 1 && v <= 4096 ? (int)v : 0;
}

static int local_ranks(void) {
  const char *e[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"};
  for (size_t i = 0; i < sizeof e / sizeof e[0]; i++) {
    int n = positive(getenv(e[i]));
    if (n) return n;
  }
  return 1;
}

/* The other tasks ready to run now: the run queue of /proc/loadavg (its
 * fourth field counts this process too), averaged over 16 samples 2 ms
 * apart; -1 when unknown. The 1-minute load average lags by a minute, and
 * this machine's load comes and goes faster than that. */
static double runnable_others(void) {
  double sum = 0;
  int n = 0;
  for (int i = 0; i < 16; i++) {
    FILE *f = fopen("/proc/loadavg", "r");
    int run = 0;
    if (f && fscanf(f, "%*s %*s %*s %d/", &run) == 1 && run >= 1) sum += run - 1, n++;
    if (f) fclose(f);
    if (i < 15) nanosleep(&(struct timespec){0, 2000000}, NULL);
  }
  return n ? sum / n : -1.0;
}

static void choose(int argc, char **argv) {
  MmrtOmp *o = &g_omp;
  cpu_set_t set;
  int online = (int)sysconf(_SC_NPROCESSORS_ONLN);
  online = online > 0 ? online : 1;
  int mine = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : online;
  o->cpus = mine > 0 ? mine : 1;
  o->ranks = local_ranks();
  o->load = runnable_others();
  /* an unbound rank shares the node's CPUs with its local peers */
  int share = mine >= online && o->ranks > 1 ? o->cpus / o->ranks : o->cpus;
  share = share > 0 ? share : 1;
  const char *flag = mmrt_flags_peek(argc, argv, "--threads"), *env = getenv("OMP_NUM_THREADS");
  if (positive(flag)) {
    o->threads = positive(flag);
    o->threads_from = "--threads";
  } else if (positive(env)) {
    o->threads = positive(env);
    o->threads_from = "OMP_NUM_THREADS";
  } else {
    /* not capped by the load: the thread count changes the order of some
     * float sums, and a run must give the same bits whatever else the
     * machine does (a resumed run continues the interrupted one bit for
     * bit); the wait policy below is what adapts to a busy machine */
    o->threads = share;
    o->threads_from = "default";
  }
  const char *w = mmrt_flags_peek(argc, argv, "--omp-wait"), *we = getenv("OMP_WAIT_POLICY");
  const char *sc = getenv("GOMP_SPINCOUNT");
  if (w && (!strcmp(w, "active") || !strcmp(w, "passive") || !strcmp(w, "spin"))) {
    o->wait = !strcmp(w, "active") ? MMRT_WAIT_ACTIVE
              : !strcmp(w, "spin") ? MMRT_WAIT_SPIN
                                   : MMRT_WAIT_PASSIVE;
    o->wait_from = "--omp-wait";
  } else if (we && *we) {
    o->wait = !strcasecmp(we, "active") ? MMRT_WAIT_ACTIVE : MMRT_WAIT_PASSIVE;
    o->wait_from = "OMP_WAIT_POLICY";
  } else {
    /* the other ranks of this node sample at about the same time: their
     * main threads are in the count, their OpenMP threads will be */
    double others = o->load < 0 ? 0 : o->load - (o->ranks - 1);
    int busy = others + o->threads * o->ranks > online + 0.5;
    o->wait = busy ? MMRT_WAIT_PASSIVE : MMRT_WAIT_SPIN;
    o->wait_from = busy ? "busy machine" : "default";
  }
  o->spin = 0;
  if (o->wait == MMRT_WAIT_SPIN)
    o->spin = MMRT_SPIN_DEFAULT;
  else if (o->wait == MMRT_WAIT_PASSIVE && o->wait_from[0] == 'O' && sc && *sc) {
    /* the environment's own bounded spin */
    char *end;
    long long v = strtoll(sc, &end, 10);
    if (!*end && v > 0) o->wait = MMRT_WAIT_SPIN, o->spin = v;
  }
  o->chosen = 1;
}

/* The choice travels to the re-executed program in one variable. */
#define CHOICE_ENV "MMRT_OMP_CHOICE"

static const char *const sources[] = {"--threads",  "OMP_NUM_THREADS", "default",
                                      "--omp-wait", "OMP_WAIT_POLICY", "busy machine"};

static int source_index(const char *s) {
  for (int i = 0; i < (int)(sizeof sources / sizeof sources[0]); i++)
    if (!strcmp(s, sources[i])) return i;
  return 2;
}

static int inherit(void) {
  const char *c = getenv(CHOICE_ENV);
  MmrtOmp *o = &g_omp;
  int tf, wf;
  if (!c ||
      sscanf(c, "%d:%d:%lld:%d:%d:%d:%d:%lf", &o->threads, &o->wait, &o->spin, &o->cpus, &o->ranks,
             &tf, &wf, &o->load) != 8 ||
      tf < 0 || tf > 5 || wf < 0 || wf > 5)
    return 0;
  o->threads_from = sources[tf];
  o->wait_from = sources[wf];
  o->chosen = 1;
  unsetenv(CHOICE_ENV);
  return 1;
}

void mmrt_omp_setup(int argc, char **argv) {
  if (inherit()) return;
  choose(argc, argv);
  MmrtOmp *o = &g_omp;
  char n[16], spin[32], c[160];
  snprintf(n, sizeof n, "%d", o->threads);
  snprintf(spin, sizeof spin, "%lld", o->spin);
  const char *w = o->wait == MMRT_WAIT_ACTIVE ? "ACTIVE" : "PASSIVE",
             *en = getenv("OMP_NUM_THREADS"), *ew = getenv("OMP_WAIT_POLICY"),
             *es = getenv("GOMP_SPINCOUNT");
  if (en && !strcmp(en, n) && ew && !strcasecmp(ew, w) &&
      (o->wait != MMRT_WAIT_SPIN || (es && !strcmp(es, spin))) &&
      (o->wait == MMRT_WAIT_SPIN || strcmp(o->wait_from, "--omp-wait") || !es))
    return; /* libgomp started with them */
  /* libgomp read its settings when it was loaded: run this program again with them */
  snprintf(c, sizeof c, "%d:%d:%lld:%d:%d:%d:%d:%.2f", o->threads, o->wait, o->spin, o->cpus,
           o->ranks, source_index(o->threads_from), source_index(o->wait_from), o->load);
  setenv("OMP_NUM_THREADS", n, 1);
  setenv("OMP_WAIT_POLICY", w, 1);
  if (o->wait == MMRT_WAIT_SPIN)
    setenv("GOMP_SPINCOUNT", spin, 1);
  else if (!strcmp(o->wait_from, "--omp-wait"))
    unsetenv("GOMP_SPINCOUNT"); /* the flag's policy, not the environment's spin count */
  setenv(CHOICE_ENV, c, 1);
  execv("/proc/self/exe", argv);
  /* no /proc: the thread count still applies, the wait policy stays libgomp's */
  unsetenv(CHOICE_ENV);
  omp_set_num_threads(o->threads);
  o->wait_from = "libgomp's default: could not re-execute";
}

const MmrtOmp *mmrt_omp(void) {
  return &g_omp;
}

void mmrt_omp_describe(char *buf, size_t n) {
  const MmrtOmp *o = &g_omp;
  if (!o->chosen) {
    snprintf(buf, n, "OpenMP settings not chosen (the runtime is not the program)");
    return;
  }
  char ranks[32] = "", wait[96], load[48] = "";
  if (o->ranks > 1) snprintf(ranks, sizeof ranks, ", %d ranks on this node", o->ranks);
  if (!strcmp(o->wait_from, "default") || !strcmp(o->wait_from, "busy machine"))
    snprintf(load, sizeof load, ", %.1f other runnable tasks", o->load < 0 ? 0 : o->load);
  if (o->wait == MMRT_WAIT_SPIN)
    snprintf(wait, sizeof wait, "spin %lld rounds, then sleep", o->spin);
  else
    snprintf(wait, sizeof wait, "%s", o->wait == MMRT_WAIT_ACTIVE ? "actively" : "passively");
  snprintf(buf, n, "%d thread%s (%s; %d CPU%s%s), OpenMP waits %s (%s%s)", o->threads,
           o->threads == 1 ? "" : "s", o->threads_from, o->cpus, o->cpus == 1 ? "" : "s", ranks,
           wait, o->wait_from, load);
}
