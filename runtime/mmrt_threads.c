/* mmrt_threads.c: the program's OpenMP thread count and wait policy.
 *
 * libgomp reads OMP_WAIT_POLICY (and OMP_NUM_THREADS) once, in its
 * constructor, before main runs, and a setenv in the executable's
 * .preinit_array is lost (libc adopts the original environment after it).
 * So the first thing main does is choose, and when the environment does not
 * already say so, set both variables and execute the program again (once:
 * the choice and its reasons travel in MMRT_OMP_CHOICE). --threads N and
 * --omp-wait active|passive (checked again, with messages, by the trainer's
 * parser) override the environment, the environment the defaults:
 *   threads: the CPUs this process may run on; when they are all the
 *            machine's (an unbound rank) shared by the ranks of this node
 *            (OMPI_COMM_WORLD_LOCAL_SIZE, MPI_LOCALNRANKS); never fewer for
 *            a loaded machine, since the count changes the order of some
 *            float sums and a run's bits must not depend on the load;
 *   waiting: active (threads spin between the many small kernels of a step:
 *            passive waiting made 2 threads 8x slower on an idle machine),
 *            unless the machine is busy (the load leaves fewer idle CPUs than
 *            this node's threads), when a spinning thread takes the CPU from
 *            the thread it waits for (2 spinning threads ran ViTFashion 15x
 *            slower than 2 passive ones at a load of 17 on 2 CPUs).
 */
#include "mmrt_threads.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <omp.h>

static MmrtOmp g_omp;

/* The value of flag f in argv ("--f V" or "--f=V"), or NULL. */
static const char *arg_value(int argc, char **argv, const char *f) {
  size_t n = strlen(f);
  const char *v = NULL;
  for (int i = 1; argv && i < argc && argv[i]; i++) {
    if (!strcmp(argv[i], f) && i + 1 < argc)
      v = argv[++i];
    else if (!strncmp(argv[i], f, n) && argv[i][n] == '=')
      v = argv[i] + n + 1;
  }
  return v;
}

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

static void choose(int argc, char **argv) {
  MmrtOmp *o = &g_omp;
  cpu_set_t set;
  int online = (int)sysconf(_SC_NPROCESSORS_ONLN);
  online = online > 0 ? online : 1;
  int mine = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : online;
  o->cpus = mine > 0 ? mine : 1;
  o->ranks = local_ranks();
  double load[1];
  o->load = getloadavg(load, 1) == 1 ? load[0] : -1.0;
  /* an unbound rank shares the node's CPUs with its local peers */
  int share = mine >= online && o->ranks > 1 ? o->cpus / o->ranks : o->cpus;
  share = share > 0 ? share : 1;
  int idle = o->load < 0 ? online : (int)((double)online - o->load + 0.5);
  const char *flag = arg_value(argc, argv, "--threads"), *env = getenv("OMP_NUM_THREADS");
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
  const char *w = arg_value(argc, argv, "--omp-wait"), *we = getenv("OMP_WAIT_POLICY");
  if (w && (!strcmp(w, "active") || !strcmp(w, "passive"))) {
    o->active = !strcmp(w, "active");
    o->wait_from = "--omp-wait";
  } else if (we && *we) {
    o->active = !strcasecmp(we, "active");
    o->wait_from = "OMP_WAIT_POLICY";
  } else {
    o->active = o->threads * o->ranks <= idle;
    o->wait_from = o->active ? "default" : "busy machine";
  }
  o->chosen = 1;
}

/* The choice travels to the re-executed program in one variable. */
#define CHOICE_ENV "MMRT_OMP_CHOICE"

static const char *const sources[] = {"--threads",  "OMP_NUM_THREADS", "default",     "idle CPUs",
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
      sscanf(c, "%d:%d:%d:%d:%d:%d:%lf", &o->threads, &o->active, &o->cpus, &o->ranks, &tf, &wf,
             &o->load) != 7 ||
      tf < 0 || tf > 6 || wf < 0 || wf > 6)
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
  char n[16], c[128];
  snprintf(n, sizeof n, "%d", o->threads);
  const char *w = o->active ? "ACTIVE" : "PASSIVE", *en = getenv("OMP_NUM_THREADS"),
             *ew = getenv("OMP_WAIT_POLICY");
  if (en && !strcmp(en, n) && ew && !strcasecmp(ew, w)) return; /* libgomp started with them */
  /* libgomp read its settings when it was loaded: run this program again with them */
  snprintf(c, sizeof c, "%d:%d:%d:%d:%d:%d:%.2f", o->threads, o->active, o->cpus, o->ranks,
           source_index(o->threads_from), source_index(o->wait_from), o->load);
  setenv("OMP_NUM_THREADS", n, 1);
  setenv("OMP_WAIT_POLICY", w, 1);
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
  char load[48] = "";
  if (!strcmp(o->threads_from, "idle CPUs") || !strcmp(o->wait_from, "busy machine") ||
      !strcmp(o->wait_from, "default"))
    snprintf(load, sizeof load, ", load %.1f", o->load);
  char ranks[32] = "";
  if (o->ranks > 1) snprintf(ranks, sizeof ranks, ", %d ranks on this node", o->ranks);
  snprintf(buf, n, "%d thread%s (%s; %d CPU%s%s%s), OpenMP waits %s (%s)", o->threads,
           o->threads == 1 ? "" : "s", o->threads_from, o->cpus, o->cpus == 1 ? "" : "s", ranks,
           load, o->active ? "actively" : "passively", o->wait_from);
}
