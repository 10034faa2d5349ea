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
 * send, recv, comm, data. */
void mmrt_trace_start(void);
int mmrt_trace_on(void);
double mmrt_trace_now(void); /* seconds */
void mmrt_trace_add(const char *name, const char *cat, double t0, double t1, int mb, int stage);
/* 0, or -1 with a message in err */
int mmrt_trace_write(const char *path, void *mesh, int rank, char *err, size_t errlen);

#endif
