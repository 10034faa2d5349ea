#ifndef MMRT_TRACE_H
#define MMRT_TRACE_H

#include <stddef.h>

/* ---- --trace FILE: the real timeline as Chrome trace JSON ----
 * Events are kept in memory (complete events: name, category, start and
 * duration in microseconds from mmrt_trace_start, the micro-batch and the
 * stage, -1 when none); mmrt_trace_write gathers every rank's events to
 * rank 0 over the world communicator (mesh may be NULL: one rank), which
 * writes {"traceEvents": [...]} with one track (tid) per rank, loadable in
 * Perfetto and chrome://tracing. Categories: forward, backward, update,
 * send, recv, comm, data, phase (a step's forward and backward under dp,
 * mmrt_comm_set_phase). */
void mmrt_trace_start(void);
int mmrt_trace_on(void);
double mmrt_trace_now(void); /* seconds */
void mmrt_trace_add(const char *name, const char *cat, double t0, double t1, int mb, int stage);
/* The same with up to MMRT_TRACE_NARGS more numeric args (keys of at most
 * 11 characters), e.g. a gradient bucket's number. */
#define MMRT_TRACE_NARGS 3
void mmrt_trace_add_args(const char *name, const char *cat, double t0, double t1, int mb, int stage,
                         int nargs, const char *const *keys, const double *vals);
/* 0, or -1 with a message in err */
int mmrt_trace_write(const char *path, void *mesh, int rank, char *err, size_t errlen);

#endif
