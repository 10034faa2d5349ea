/* mmrt_prof.c: --profile. Each profiled step's ops are timed mark to mark
 * (CLOCK_MONOTONIC) and summed per site (kind, layer, phase: the generated
 * code passes the same string constants every step, so a site is found by
 * its pointers); the report merges sites by kind and by layer. When
 * profiling is off, the step calls mmrt_prof_begin once and nothing else. */
#include "mmrt_prof.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct Site {
  const char *kind, *layer;
  int phase;
  double sec;
  int64_t calls;
} Site;

enum { NSITES = 8192 };

static struct {
  int on, seen;    /* --profile; training steps begun */
  int64_t steps;   /* steps profiled */
  double step_sec; /* their wall time, first mark to last */
  Site *cur;
  double t_cur, t_step;
  Site sites[NSITES];
  int nsites, full;
} g;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void mmrt_prof_enable(void) {
  g.on = 1;
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
      g.nsites++;
      *s = (Site){kind, layer, phase, 0.0, 0};
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
  }
  g.t_cur = t;
  if (!kind) {
    g.cur = NULL;
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

static void print_rows(FILE *out, const char *what, Row *rows, int n, double all, int limit) {
  double per = 1e3 / (double)g.steps;
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
  static Row rows[NSITES];
  double ops = 0, ph[MMRT_PROF_NPHASES] = {0};
  for (int i = 0; i < NSITES; i++)
    if (g.sites[i].kind) {
      ops += g.sites[i].sec;
      ph[g.sites[i].phase] += g.sites[i].sec;
    }
  double per = 1e3 / (double)g.steps;
  fprintf(out,
          "profile: %lld training steps (the first left out), %.3f ms per step: forward %.3f, "
          "backward %.3f, update %.3f, communication %.3f ms (ms per step below)\n",
          (long long)g.steps, g.step_sec * per, ph[0] * per, ph[1] * per, ph[2] * per, ph[3] * per);
  if (g.full) fprintf(out, "profile: more than %d op sites; the rest not timed\n", NSITES / 2);
  int n = merge(rows, 0);
  print_rows(out, "op kind", rows, n, ops, 40);
  n = merge(rows, 1);
  print_rows(out, "layer", rows, n, ops, 60);
}
