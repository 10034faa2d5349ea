/* --trace FILE: the trainer's timeline as Chrome trace JSON (see mmrt_trace.h).
 * Its own file so the communication layer, the pipeline and the step loop
 * can all record events without depending on one another. */
#include "mmrt_trace.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "mmrt_ckpt.h"
#include "mmrt_comm.h"

typedef struct {
  char name[24], cat[12];
  double t0, t1;
  int mb, stage;
  char key[MMRT_TRACE_NARGS][12]; /* copied, not pointed to: rank 0 writes other ranks' events */
  double val[MMRT_TRACE_NARGS];
} TraceEv;

static TraceEv *g_ev;
static size_t g_nev, g_capev;
static int g_trace;
static double g_t0;

double mmrt_trace_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void mmrt_trace_start(void) {
  g_trace = 1;
  g_t0 = mmrt_trace_now();
}

int mmrt_trace_on(void) {
  return g_trace;
}

void mmrt_trace_add(const char *name, const char *cat, double t0, double t1, int mb, int stage) {
  mmrt_trace_add_args(name, cat, t0, t1, mb, stage, 0, NULL, NULL);
}

void mmrt_trace_add_args(const char *name, const char *cat, double t0, double t1, int mb, int stage,
                         int nargs, const char *const *keys, const double *vals) {
  if (!g_trace) return;
  if (g_nev == g_capev) {
    size_t cap = g_capev ? 2 * g_capev : 1024;
    TraceEv *e = realloc(g_ev, cap * sizeof *e);
    if (!e) return;
    g_ev = e, g_capev = cap;
  }
  TraceEv *e = &g_ev[g_nev++];
  snprintf(e->name, sizeof e->name, "%s", name);
  snprintf(e->cat, sizeof e->cat, "%s", cat);
  e->t0 = t0, e->t1 = t1, e->mb = mb, e->stage = stage; /* CLOCK_MONOTONIC: one node's clock */
  for (int k = 0; k < MMRT_TRACE_NARGS; k++) {
    snprintf(e->key[k], sizeof e->key[k], "%s", k < nargs ? keys[k] : "");
    e->val[k] = k < nargs ? vals[k] : 0;
  }
}

static void write_events(FILE *f, const TraceEv *ev, size_t n, int rank, int *first) {
  for (size_t i = 0; i < n; i++) {
    const TraceEv *e = &ev[i];
    if (e->t1 < g_t0) continue; /* before the trace started */
    fprintf(f,
            "%s\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":0,\"tid\":%d,\"ts\":%.3f,"
            "\"dur\":%.3f,\"args\":{\"mb\":%d,\"stage\":%d",
            *first ? "" : ",", e->name, e->cat, rank, 1e6 * (e->t0 - g_t0), 1e6 * (e->t1 - e->t0),
            e->mb, e->stage);
    for (int k = 0; k < MMRT_TRACE_NARGS && e->key[k][0]; k++)
      fprintf(f, ",\"%s\":%.17g", e->key[k], e->val[k]);
    fprintf(f, "}}");
    *first = 0;
  }
}

int mmrt_trace_write(const char *path, void *mesh, int rank, char *err, size_t errlen) {
  MmrtMesh *m = mesh;
  int world = m ? m->size[MMRT_AXIS_WORLD] : 1;
  long long n = (long long)g_nev;
  long long *counts = rank == 0 ? calloc((size_t)world, sizeof *counts) : NULL;
  if (m) MPI_Gather(&n, 1, MPI_LONG_LONG, counts, 1, MPI_LONG_LONG, 0, m->comm[MMRT_AXIS_WORLD]);
  /* the earliest start of any rank's trace is time 0 */
  if (m) MPI_Allreduce(MPI_IN_PLACE, &g_t0, 1, MPI_DOUBLE, MPI_MIN, m->comm[MMRT_AXIS_WORLD]);
  if (rank != 0) {
    if (m && n)
      MPI_Send(g_ev, (int)(n * (long long)sizeof *g_ev), MPI_BYTE, 0, 77, m->comm[MMRT_AXIS_WORLD]);
    return 0;
  }
  if (!m) counts[0] = n;
  MmrtOut o;
  char oerr[512];
  int rc = 0;
  if (mmrt_out_begin(&o, path, oerr, sizeof oerr) != MMRT_OK) {
    snprintf(err, errlen, "--trace %s", oerr);
    rc = -1;
  } else {
    FILE *f = o.f;
    fprintf(f, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[");
    int first = 1;
    for (int r = 0; r < world; r++)
      fprintf(f,
              "%s\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":%d,\"args\":{\"name\":"
              "\"rank %d\"}}",
              first ? "" : ",", r, r),
          first = 0;
    write_events(f, g_ev, g_nev, 0, &first);
    for (int r = 1; r < world; r++) {
      TraceEv *ev = malloc(sizeof *ev * (size_t)(counts[r] + 1));
      if (counts[r] && ev)
        MPI_Recv(ev, (int)(counts[r] * (long long)sizeof *ev), MPI_BYTE, r, 77,
                 m->comm[MMRT_AXIS_WORLD], MPI_STATUS_IGNORE);
      if (ev) write_events(f, ev, (size_t)counts[r], r, &first);
      free(ev);
    }
    fprintf(f, "\n]}\n");
    if (mmrt_out_finish(&o, 1, oerr, sizeof oerr) != MMRT_OK) {
      snprintf(err, errlen, "--trace %s", oerr);
      rc = -1;
    }
  }
  free(counts);
  return rc;
}
