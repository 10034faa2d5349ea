/* mmrt_mem.c: VmRSS, VmHWM and RssFile from /proc/self/status, executable
 * anonymous pages from /proc/self/smaps; the message and exit of an
 * allocation the kernels cannot go on without. */
#include "mmrt_mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#ifdef _OPENMP
#include <omp.h>
#endif

static int64_t status_kib(const char *key) {
  FILE *f = fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  size_t k = strlen(key);
  long long v = -1;
  while (fgets(line, sizeof line, f))
    if (strncmp(line, key, k) == 0 && line[k] == ':') {
      if (sscanf(line + k + 1, "%lld", &v) != 1) v = -1;
      break;
    }
  fclose(f);
  return v < 0 ? -1 : (int64_t)v * 1024;
}

int64_t mmrt_mem_rss(void) {
  return status_kib("VmRSS");
}

int64_t mmrt_mem_hwm(void) {
  return status_kib("VmHWM");
}

/* Resident bytes of mappings that are executable and not backed by a file
 * (a region line: "start-end perms offset dev inode [path]"). */
static int64_t jit_code_bytes(void) {
  FILE *f = fopen("/proc/self/smaps", "r");
  if (!f) return -1;
  char line[512];
  int in_jit = 0;
  long long sum = 0, kib;
  while (fgets(line, sizeof line, f)) {
    char perms[8];
    unsigned long long inode;
    int path_at = 0;
    if (sscanf(line, "%*x-%*x %7s %*x %*x:%*x %llu %n", perms, &inode, &path_at) == 2) {
      in_jit = strchr(perms, 'x') && inode == 0 && line[path_at] != '[';
    } else if (in_jit && sscanf(line, "Rss: %lld kB", &kib) == 1) {
      sum += kib;
    }
  }
  fclose(f);
  return (int64_t)sum * 1024;
}

static int reset_hwm(void) {
  FILE *f = fopen("/proc/self/clear_refs", "w");
  if (!f) return 0;
  int ok = fputs("5", f) >= 0;
  return fclose(f) == 0 && ok;
}

int mmrt_mem_begin(MmrtMemBaseline *b) {
  b->hwm_reset = reset_hwm();
  b->rss = mmrt_mem_rss();
  b->lib_code = status_kib("RssFile");
  b->jit_code = jit_code_bytes();
  return b->rss < 0 || b->lib_code < 0 || b->jit_code < 0 ? -1 : 0;
}

int mmrt_mem_end(const MmrtMemBaseline *b, int64_t kernel_heap, MmrtMemPeak *out) {
  int64_t hwm = mmrt_mem_hwm(), lib = status_kib("RssFile"), jit = jit_code_bytes();
  if (b->rss < 0 || hwm < 0 || lib < 0 || jit < 0) {
    *out = (MmrtMemPeak){-1, -1, -1, -1, -1};
    return -1;
  }
  out->hwm = hwm - b->rss;
  out->lib_code = lib - b->lib_code;
  out->jit_code = jit - b->jit_code;
  out->kernel_heap = kernel_heap;
  out->peak = out->hwm - out->lib_code - out->jit_code - kernel_heap;
  return 0;
}

int64_t mmrt_mem_as_limit(void) {
  struct rlimit r;
  if (getrlimit(RLIMIT_AS, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return -1;
  return (int64_t)r.rlim_cur;
}

static void limit_note(char *buf, size_t len) {
  int64_t lim = mmrt_mem_as_limit();
  buf[0] = 0;
  if (lim >= 0)
    snprintf(buf, len, " (address-space limit %lld bytes, ulimit -v %lld)", (long long)lim,
             (long long)(lim / 1024));
}

_Noreturn void mmrt_die_oom(const char *what, size_t bytes) {
  char note[128];
  limit_note(note, sizeof note);
  fprintf(stderr, "mmrt: error: out of memory: cannot allocate %zu bytes for %s%s\n", bytes, what,
          note);
  fflush(NULL);
  exit(1);
}

void *mmrt_xmalloc(size_t n, const char *what) {
  void *p = malloc(n ? n : 1);
  if (!p) mmrt_die_oom(what, n);
  return p;
}

_Noreturn void mmrt_die_oom_dnnl(const char *what, const char *detail) {
  char note[128];
  limit_note(note, sizeof note);
  fprintf(stderr, "mmrt: error: out of memory: oneDNN cannot %s for %s%s\n", detail, what, note);
  fflush(NULL);
  exit(1);
}

static volatile int starting_threads;

static void threads_failed(void) {
  if (!starting_threads) return;
  char note[128];
  limit_note(note, sizeof note);
  fprintf(stderr, "mmrt: error: out of memory: cannot create %d OpenMP threads (their stacks)%s\n",
          starting_threads, note);
}

void mmrt_mem_start_threads(void) {
#ifdef _OPENMP
  static int started;
  if (started) return;
  started = 1;
  atexit(threads_failed); /* libgomp's failure is exit(1) */
  starting_threads = omp_get_max_threads();
#pragma omp parallel
  {
    __asm__ volatile("" ::: "memory");
  }
  starting_threads = 0;
#endif
}
