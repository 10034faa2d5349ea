/* mmrt_mem.h: what a trainer really holds in memory, measured by the
 * kernel, independently of the memory plan.
 *
 * mmrt_mem_begin takes the baseline after MPI is up and before the trainer
 * loads data or allocates its arenas: the resident bytes (VmRSS of
 * /proc/self/status) and the high-water mark reset to them (5 written to
 * /proc/self/clear_refs).  mmrt_mem_end reads the high-water mark VmHWM:
 * every page touched since, for the arenas, the data set and its batches,
 * oneDNN's scratchpads and primitive cache, OpenMP's threads, MPI's
 * buffers (shared memory included) and the runtime's own mallocs, at the
 * moment the total was largest (transients inside a step included).
 *
 * Code is not data and the plan does not hold it, so its growth is
 * measured apart and taken out of the peak: pages of mapped files (the
 * shared libraries' text: RssFile), executable anonymous pages (the
 * kernels oneDNN generates at run time, from /proc/self/smaps) and the heap
 * bytes oneDNN keeps for those kernels' objects (the caller measures them:
 * mmrt_dnnl_prim_bytes).  All three only grow, so subtracting them at the
 * end can only under-count the data peak by code that arrived after the
 * peak moment.
 */
#ifndef MMRT_MEM_H
#define MMRT_MEM_H

#include <stddef.h>
#include <stdint.h>

typedef struct MmrtMemBaseline {
  int64_t rss;      /* VmRSS at the start */
  int64_t lib_code; /* RssFile at the start */
  int64_t jit_code; /* resident executable anonymous pages at the start */
  int hwm_reset;    /* the high-water mark was reset (else it is the process's) */
} MmrtMemBaseline;

typedef struct MmrtMemPeak {
  int64_t peak;     /* hwm - lib_code - jit_code - kernel_heap: data at its peak */
  int64_t hwm;      /* VmHWM - baseline VmRSS */
  int64_t lib_code; /* growth of RssFile */
  int64_t jit_code; /* growth of executable anonymous pages */
  int64_t kernel_heap;
} MmrtMemPeak;

/* 0, or -1 when /proc/self/status cannot be read (then every figure is
 * -1 and nothing is reported). */
int mmrt_mem_begin(MmrtMemBaseline *b);
int mmrt_mem_end(const MmrtMemBaseline *b, int64_t kernel_heap, MmrtMemPeak *out);

/* Resident set size and its high-water mark in bytes; -1 if unknown. */
int64_t mmrt_mem_rss(void);
int64_t mmrt_mem_hwm(void);

/* ---- allocations the program cannot go on without ---- */

/* A kernel's buffer (the kernels have no error path): prints
 * "mmrt: error: out of memory: cannot allocate N bytes for WHAT" with the
 * address-space limit when one is set (ulimit -v), and exits with status
 * 1. */
_Noreturn void mmrt_die_oom(const char *what, size_t bytes);
/* malloc(n), or mmrt_die_oom(what, n). */
void *mmrt_xmalloc(size_t n, const char *what);
/* The same for a oneDNN primitive that could not be made or run for want
 * of memory: what names the kernel and its shape. */
_Noreturn void mmrt_die_oom_dnnl(const char *what, const char *detail);

/* Starts the OpenMP threads now (a first parallel region): under an
 * address-space limit their stacks may not fit, and libgomp then exits
 * with "Thread creation failed"; this says it is out of memory.  Programs
 * call it before their large allocations. */
void mmrt_mem_start_threads(void);

/* RLIMIT_AS in bytes, or -1 when unlimited. */
int64_t mmrt_mem_as_limit(void);

#endif
