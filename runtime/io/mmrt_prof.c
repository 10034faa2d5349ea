/* mmrt_prof.c: --profile. Each profiled step's ops are timed mark to mark
 * (CLOCK_MONOTONIC) and summed per site (kind, layer, phase: the generated
 * code passes the same string constants every step, so a site is found by
 * its pointers); the report merges sites by kind and by layer. When
 * profiling is off, the step calls mmrt_prof_begin once and nothing else.
 *
 * The table is of the typical step, as the trainer's measured median is:
 * each of the last KEEP steps' site times are kept, and the report averages
 * the middle fifth of them by step time (around the median), so a step
 * the machine interrupted (another program's burst, a descheduled thread)
 * does not count. A mean over all steps ran 20 to 100% above the median
 * step on a shared machine, which made the table useless beside the
 * median or the prediction (docs/planner.md). */
#include "mmrt_prof.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct Site {
  const char *kind, *layer;
  int phase, idx; /* idx: the site's column in the kept steps */
  double sec;     /* over the middle steps (the report fills it) */
  int64_t calls;
} Site;

enum { NSITES = 8192, NCOLS = NSITES / 2, KEEP = 256 };

static struct {
  int on, seen;    /* --profile; training steps begun */
  int64_t steps;   /* steps profiled */
  double step_sec; /* their wall time, first mark to last */
  Site *cur;
  double t_cur, t_step;
  Site sites[NSITES];
  int nsites, full;
  double *kept; /* KEEP x NCOLS: a step's seconds per site, a ring */
  double kept_total[KEEP];
  double *cur_step; /* the step being profiled, per site */
} g;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void mmrt_prof_enable(void) {
  g.on = 1;
  g.kept = calloc((size_t)KEEP * NCOLS, sizeof *g.kept);
  g.cur_step = calloc(NCOLS, sizeof *g.cur_step);
  if (!g.kept || !g.cur_step) { /* the table then is of all steps' means */
    free(g.kept), free(g.cur_step);
    g.kept = g.cur_step = NULL;
  }
}

int mmrt_prof_begin(int training) {
  if (!g.on || !training) return 0;
  if (g.seen++ == 0) return 0; /* the first step creates oneDNN's primitives */
  g.cur = NULL;
  g.t_step = g.t_cur = now();
  return 1;
}

static Site *site(const char *kind, const char *layer, int phase) {
  size_t h = ((size_t)(uintptr_t)kind * 31u + (size_t)(uintptr_t)layer) * 7u + (size_t)phase;
  for (size_t i = 0; i < NSITES; i++) {
    Site *s = &g.sites[(h + i) % NSITES];
    if (s->kind == kind && s->layer == layer && s->phase == phase) return s;
    if (!s->kind) {
      if (g.nsites >= NSITES / 2) { /* keep the table sparse: further sites are not timed */
        g.full = 1;
        return NULL;
      }
      *s = (Site){kind, layer, phase, g.nsites++, 0.0, 0};
      return s;
    }
  }
  return NULL;
}

void mmrt_prof_mark(const char *kind, const char *layer, int phase) {
  double t = now();
  if (g.cur) {
    g.cur->sec += t - g.t_cur;
    g.cur->calls++;
    if (g.cur_step) g.cur_step[g.cur->idx] += t - g.t_cur;
  }
  g.t_cur = t;
  if (!kind) {
    g.cur = NULL;
    if (g.kept) { /* keep the step in the ring */
      int slot = (int)(g.steps % KEEP);
      memcpy(g.kept + (size_t)slot * NCOLS, g.cur_step, NCOLS * sizeof *g.cur_step);
      memset(g.cur_step, 0, NCOLS * sizeof *g.cur_step);
      g.kept_total[slot] = t - g.t_step;
    }
    g.steps++;
    g.step_sec += t - g.t_step;
    return;
  }
  g.cur = site(kind, layer ? layer : "-", phase < 0 || phase >= MMRT_PROF_NPHASES ? 0 : phase);
}

/* ---- the report ---- */

typedef struct Row {
  const char *name;
  double sec[MMRT_PROF_NPHASES], total;
  int64_t calls;
} Row;

static int by_total(const void *a, const void *b) {
  double x = ((const Row *)a)->total, y = ((const Row *)b)->total;
  return x < y ? 1 : x > y ? -1 : 0;
}

/* Sites merged by kind (by_layer 0) or layer (1), sorted by time. */
static int merge(Row *rows, int by_layer) {
  int n = 0;
  for (int i = 0; i < NSITES; i++) {
    const Site *s = &g.sites[i];
    if (!s->kind) continue;
    const char *name = by_layer ? s->layer : s->kind;
    int r = 0;
    while (r < n && strcmp(rows[r].name, name)) r++;
    if (r == n) rows[n++] = (Row){.name = name};
    rows[r].sec[s->phase] += s->sec;
    rows[r].total += s->sec;
    rows[r].calls += s->calls;
  }
  qsort(rows, (size_t)n, sizeof *rows, by_total);
  return n;
}

static void print_rows(FILE *out, const char *what, Row *rows, int n, double all, int limit,
                       double per) {
  fprintf(out, "  %-28s %9s %9s %9s %9s %9s %6s %7s\n", what, "forward", "backward", "update",
          "comm", "total", "%", "calls");
  double rest[MMRT_PROF_NPHASES] = {0}, rest_total = 0;
  int64_t rest_calls = 0;
  for (int r = 0; r < n; r++) {
    if (r >= limit) {
      for (int p = 0; p < MMRT_PROF_NPHASES; p++) rest[p] += rows[r].sec[p];
      rest_total += rows[r].total;
      rest_calls += rows[r].calls;
      continue;
    }
    fprintf(out, "  %-28.28s %9.3f %9.3f %9.3f %9.3f %9.3f %6.1f %7lld\n", rows[r].name,
            rows[r].sec[0] * per, rows[r].sec[1] * per, rows[r].sec[2] * per, rows[r].sec[3] * per,
            rows[r].total * per, all > 0 ? 100.0 * rows[r].total / all : 0.0,
            (long long)(rows[r].calls / g.steps));
  }
  if (n > limit)
    fprintf(out, "  %-28s %9.3f %9.3f %9.3f %9.3f %9.3f %6.1f %7lld\n", "(the others)",
            rest[0] * per, rest[1] * per, rest[2] * per, rest[3] * per, rest_total * per,
            all > 0 ? 100.0 * rest_total / all : 0.0, (long long)(rest_calls / g.steps));
}

void mmrt_prof_print(FILE *out) {
  if (!g.on) return;
  if (g.steps == 0) {
    fprintf(out, "profile: no step profiled (the first training step is left out)\n");
    return;
  }
  /* the kept steps from the 40th to the 60th percentile of step time: each site's seconds
   * over them (the calls stay those of all steps, the same every step) */
  int kept = g.kept ? (int)(g.steps < KEEP ? g.steps : KEEP) : 0, lo = kept * 2 / 5, hi = kept - lo,
      order[KEEP];
  double mid_sec = 0, mean_ms = 1e3 * g.step_sec / (double)g.steps;
  for (int i = 0; i < kept; i++) order[i] = i;
  for (int i = 1; i < kept; i++) /* by step time (insertion: at most KEEP) */
    for (int j = i; j > 0 && g.kept_total[order[j]] < g.kept_total[order[j - 1]]; j--) {
      int x = order[j];
      order[j] = order[j - 1], order[j - 1] = x;
    }
  if (kept > 0) {
    for (int i = 0; i < NSITES; i++) g.sites[i].sec = 0;
    for (int r = lo; r < hi; r++) {
      const double *row = g.kept + (size_t)order[r] * NCOLS;
      mid_sec += g.kept_total[order[r]];
      for (int i = 0; i < NSITES; i++)
        if (g.sites[i].kind) g.sites[i].sec += row[g.sites[i].idx];
    }
  }
  int nmid = kept > 0 ? hi - lo : (int)g.steps;
  if (kept == 0) mid_sec = g.step_sec;
  static Row rows[NSITES];
  double ops = 0, ph[MMRT_PROF_NPHASES] = {0};
  for (int i = 0; i < NSITES; i++)
    if (g.sites[i].kind) {
      ops += g.sites[i].sec;
      ph[g.sites[i].phase] += g.sites[i].sec;
    }
  double per = 1e3 / (double)nmid;
  fprintf(out,
          "profile: %lld training steps (the first left out; below, the mean of the %d around "
          "the median step time; of all: %.3f ms), %.3f ms per step: forward %.3f, "
          "backward %.3f, update %.3f, communication %.3f ms (ms per step below)\n",
          (long long)g.steps, nmid, mean_ms, mid_sec * per, ph[0] * per, ph[1] * per, ph[2] * per,
          ph[3] * per);
  if (g.full) fprintf(out, "profile: more than %d op sites; the rest not timed\n", NSITES / 2);
  int n = merge(rows, 0);
  print_rows(out, "op kind", rows, n, ops, 40, per);
  n = merge(rows, 1);
  print_rows(out, "layer", rows, n, ops, 60, per);
}
