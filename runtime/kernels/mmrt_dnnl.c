/* mmrt_dnnl.c: the oneDNN-backed kernels of libmmrt (matmul, linear, conv,
 * softmax, eltwise).
 *
 * One CPU engine and one stream for the process, created on first use.
 * Every primitive is created once per (kind, dtype, shape, flags) and kept
 * in an open-addressing hash table together with one dnnl_memory_t per
 * argument; a call only swaps data handles and executes. All buffers are
 * plain row-major layouts (the arena's layout). Convolutions alone let
 * oneDNN choose its layouts (format "any": channel-blocked, which its
 * direct jit kernels need; on plain layouts it falls back to im2col + gemm,
 * several times slower): their arguments are reordered into grow-only
 * buffers before the call and the results back after it.
 * oneDNN 2.6 backward primitives take no post-ops, so "accumulate" on a
 * backward kernel runs into a scratch buffer and adds.
 *
 * Assumes calls come from one thread at a time (see mmrt_kernels.h).
 */
#include "mmrt_kernels.h"

#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>

#include <malloc.h>
#include <signal.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mmrt_mem.h"

/* ---- errors ---------------------------------------------------------- */

static char guard_shape[512]; /* the shapes of the primitive being made (errors name it) */

static _Noreturn void die(const char *what, const char *detail) {
  fprintf(stderr, "mmrt: internal error in %s: %s\n", what, detail);
  abort();
}

/* A failed oneDNN call: out of memory is the user's limit (a message and
 * exit 1, mmrt_mem.h), anything else an internal error. */
static _Noreturn void dnnl_fail(dnnl_status_t st, const char *what, int line, const char *call) {
  char msg[1024];
  if (st == dnnl_out_of_memory) {
    snprintf(msg, sizeof msg, "%s (%s)", guard_shape[0] ? guard_shape : "its buffers", call);
    mmrt_die_oom_dnnl(what, msg);
  }
  snprintf(msg, sizeof msg, "oneDNN %s (%s:%d: %s)", dnnl_status2str(st), __FILE__, line, call);
  die(what, msg);
}

#define DNNL_CHECK(call, what)                                                                     \
  do {                                                                                             \
    dnnl_status_t st_ = (call);                                                                    \
    if (st_ != dnnl_success) dnnl_fail(st_, what, __LINE__, #call);                                \
  } while (0)

/* oneDNN generates its kernels' code while it creates a primitive, into
 * memory it maps, and some of it on the primitive's first run (AVX2
 * kernels on a Zen 3: in a once-only initialisation inside the run's
 * parallel region); under an address-space limit (ulimit -v) a failed map
 * can crash it (SIGSEGV inside dnnl_primitive_create or the first
 * dnnl_primitive_execute) or throw where the unwinder itself cannot be
 * loaded (SIGABRT, "libgcc_s.so.1 must be installed") instead of returning
 * dnnl_out_of_memory.  With a limit set, such a crash during a guarded
 * call is reported as what it is, naming the primitive and its shapes, and
 * the program exits with status 1; without one (or under ASan, which owns
 * SIGSEGV) a crash stays a crash. */
static struct sigaction guard_old[3];
static int guard_set;

#if !defined(__SANITIZE_ADDRESS__)
static char guard_msg[1024];

static void guard_handler(int sig) {
  ssize_t n = write(2, guard_msg, strlen(guard_msg));
  (void)n;
  (void)sig;
  _exit(1);
}
#endif

/* doing: "creating" or "first running"; shape: the primitive's arguments */
static void guard_on(const char *what, const char *doing, const char *shape) {
#if !defined(__SANITIZE_ADDRESS__)
  int64_t lim = mmrt_mem_as_limit();
  if (lim < 0) return;
  snprintf(guard_msg, sizeof guard_msg,
           "mmrt: error: out of memory: oneDNN crashed %s the primitive of %s (%s) within "
           "the address-space limit of %lld bytes (ulimit -v %lld): raise the limit\n",
           doing, what, shape, (long long)lim, (long long)(lim / 1024));
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = guard_handler;
  sigemptyset(&sa.sa_mask);
  guard_set = sigaction(SIGSEGV, &sa, &guard_old[0]) == 0 &&
              sigaction(SIGBUS, &sa, &guard_old[1]) == 0 &&
              sigaction(SIGABRT, &sa, &guard_old[2]) == 0;
#else
  (void)what, (void)doing, (void)shape;
#endif
}

static void guard_off(void) {
  if (!guard_set) return;
  sigaction(SIGSEGV, &guard_old[0], NULL);
  sigaction(SIGBUS, &guard_old[1], NULL);
  sigaction(SIGABRT, &guard_old[2], NULL);
  guard_set = 0;
}

static dnnl_data_type_t dnnl_dt(MmrtDtype dt, const char *what) {
  if (dt == MMRT_F32) return dnnl_f32;
  if (dt == MMRT_BF16) return dnnl_bf16;
  die(what, "unknown dtype");
}

/* f32 only (softmax, eltwise) */
static dnnl_data_type_t dnnl_f32_only(MmrtDtype dt, const char *what) {
  if (dt == MMRT_F32) return dnnl_f32;
  die(what, dt == MMRT_BF16 ? "bf16 is not implemented for this kernel" : "unknown dtype");
}

/* ---- engine, stream, scratch ------------------------------------------ */

static dnnl_engine_t eng;
static dnnl_stream_t stream;
static float *scratch;
static size_t scratch_cap;

static void ensure_engine(void) {
  if (eng) return;
  DNNL_CHECK(dnnl_engine_create(&eng, dnnl_cpu, 0), "engine");
  DNNL_CHECK(dnnl_stream_create(&stream, eng, dnnl_stream_default_flags), "stream");
}

/* A grow-only fp32 buffer of n elements for accumulate-by-add. */
static float *get_scratch(size_t n) {
  if (n > scratch_cap) {
    free(scratch);
    scratch = mmrt_xmalloc(n * sizeof(float), "oneDNN kernels' accumulation scratch");
    scratch_cap = n;
  }
  return scratch;
}

static void add_into(float *dst, const float *src, size_t n) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

/* ---- the primitive cache ---------------------------------------------- */

enum { KEY_LEN = 28, MAX_ARGS = 6 };

typedef struct Key {
  int64_t v[KEY_LEN]; /* v[0] = kind, v[1] = dtype, then shape and flags */
} Key;

typedef struct Entry {
  Key key;
  int used;
  dnnl_primitive_t prim;
  int nargs;
  int arg[MAX_ARGS];
  dnnl_memory_t mem[MAX_ARGS];
  /* an argument whose layout is the primitive's own, not plain: the reorder
   * from (an input) or to (an output) the caller's plain buffer, that
   * buffer's memory, and the bytes of the primitive's copy */
  dnnl_primitive_t reo[MAX_ARGS];
  dnnl_memory_t user[MAX_ARGS];
  size_t bytes[MAX_ARGS];
  char shape[512]; /* guard_shape when it was made */
  int ran;         /* run once (the guard is for the first run) */
} Entry;

enum {
  K_MATMUL = 1,
  K_CONV_FWD,
  K_CONV_BWD_DATA,
  K_CONV_BWD_WEIGHTS,
  K_SOFTMAX_FWD,
  K_SOFTMAX_BWD,
  K_ELTWISE_FWD,
  K_ELTWISE_BWD,
};

static Entry *table;
static int table_cap, table_used;
static int64_t prim_heap;      /* heap bytes oneDNN kept creating the primitives and on their first
                                 runs (an AVX2 kernel makes its code and state lazily, on the first) */
static int64_t scratchpad_max; /* the largest scratchpad a primitive asks for */
/* grow-only buffers holding arguments in a primitive's layout, one per
 * argument position (calls come one at a time) */
static void *layout_buf[MAX_ARGS];
static size_t layout_cap[MAX_ARGS];

static uint64_t key_hash(const Key *k) {
  uint64_t h = 1469598103934665603ull;
  for (int i = 0; i < KEY_LEN; i++) {
    h ^= (uint64_t)k->v[i];
    h *= 1099511628211ull;
    h ^= h >> 29;
  }
  return h;
}

static Entry *slot_for(Entry *tab, int cap, const Key *k) {
  uint64_t i = key_hash(k) & (uint64_t)(cap - 1);
  while (tab[i].used && memcmp(&tab[i].key, k, sizeof *k) != 0) i = (i + 1) & (uint64_t)(cap - 1);
  return &tab[i];
}

/* The key with the thread count the primitive runs under (its last value):
 * oneDNN sizes a primitive's per-thread parts when it creates it, and the
 * step runs small ops on one thread (mmrt_threads_small). */
static Key threaded(const Key *k) {
  Key t = *k;
  if (t.v[KEY_LEN - 1]) die("primitive cache", "a key uses the thread count's slot");
#ifdef _OPENMP
  t.v[KEY_LEN - 1] = omp_get_max_threads();
#else
  t.v[KEY_LEN - 1] = 1;
#endif
  return t;
}

static Entry *cache_find(const Key *key) {
  if (!table) return NULL;
  Key t = threaded(key), *k = &t;
  Entry *e = slot_for(table, table_cap, k);
  return e->used ? e : NULL;
}

static Entry *cache_insert(const Key *key) {
  Key t = threaded(key), *k = &t;
  if (2 * (table_used + 1) > table_cap) {
    int ncap = table_cap ? 2 * table_cap : 64;
    Entry *nt = calloc((size_t)ncap, sizeof *nt);
    if (!nt) mmrt_die_oom("the oneDNN primitive cache", (size_t)ncap * sizeof *nt);
    for (int i = 0; i < table_cap; i++)
      if (table[i].used) *slot_for(nt, ncap, &table[i].key) = table[i];
    free(table);
    table = nt;
    table_cap = ncap;
  }
  Entry *e = slot_for(table, table_cap, k);
  memset(e, 0, sizeof *e);
  e->key = *k;
  e->used = 1;
  table_used++;
  return e;
}

int mmrt_dnnl_cache_size(void) {
  return table_used;
}

int64_t mmrt_dnnl_prim_bytes(void) {
  return prim_heap;
}

int64_t mmrt_dnnl_scratchpad_max(void) {
  return scratchpad_max;
}

int64_t mmrt_dnnl_layout_bytes(void) {
  int64_t n = 0;
  for (int a = 0; a < MAX_ARGS; a++) n += (int64_t)layout_cap[a];
  return n;
}

void mmrt_kernels_shutdown(void) {
  for (int i = 0; i < table_cap; i++) {
    if (!table[i].used) continue;
    for (int a = 0; a < table[i].nargs; a++) {
      dnnl_memory_destroy(table[i].mem[a]);
      if (table[i].reo[a]) {
        dnnl_primitive_destroy(table[i].reo[a]);
        dnnl_memory_destroy(table[i].user[a]);
      }
    }
    dnnl_primitive_destroy(table[i].prim);
  }
  free(table);
  table = NULL;
  table_cap = table_used = 0;
  prim_heap = scratchpad_max = 0;
  if (stream) dnnl_stream_destroy(stream);
  if (eng) dnnl_engine_destroy(eng);
  stream = NULL;
  eng = NULL;
  free(scratch);
  scratch = NULL;
  scratch_cap = 0;
  for (int a = 0; a < MAX_ARGS; a++) {
    free(layout_buf[a]);
    layout_buf[a] = NULL;
    layout_cap[a] = 0;
  }
}

/* guard_shape: "arguments 64x784, 784x128, 64x128" of the primitive of pd. */
static void describe(const_dnnl_primitive_desc_t pd, int nargs, const int *args) {
  size_t pos = (size_t)snprintf(guard_shape, sizeof guard_shape, "arguments");
  for (int a = 0; a < nargs && pos < sizeof guard_shape; a++) {
    const dnnl_memory_desc_t *md =
        dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, args[a]);
    pos += (size_t)snprintf(guard_shape + pos, sizeof guard_shape - pos, "%s ", a ? "," : "");
    for (int d = 0; md && d < md->ndims && pos < sizeof guard_shape; d++)
      pos += (size_t)snprintf(guard_shape + pos, sizeof guard_shape - pos, "%s%lld", d ? "x" : "",
                              (long long)md->dims[d]);
  }
}

static int is_output(int arg) {
  return arg == DNNL_ARG_DST || arg == DNNL_ARG_DIFF_SRC || arg == DNNL_ARG_DIFF_WEIGHTS ||
         arg == DNNL_ARG_DIFF_BIAS;
}

/* Create the primitive of `pd` (which the entry now owns the result of),
 * and one memory object per listed argument, shaped as the pd says. With
 * `plain` (the callers' layouts, per argument), an argument the pd lays out
 * otherwise gets a reorder between the two. The pd is destroyed. */
static void entry_build(Entry *e, dnnl_primitive_desc_t pd, int nargs, const int *args,
                        const dnnl_memory_desc_t *plain, const char *what) {
  size_t heap0 = mallinfo2().uordblks;
  describe(pd, nargs, args);
  snprintf(e->shape, sizeof e->shape, "%s", guard_shape);
  guard_on(what, "creating", guard_shape);
  dnnl_status_t st = dnnl_primitive_create(&e->prim, pd);
  guard_off();
  if (st != dnnl_success) dnnl_fail(st, what, __LINE__, "dnnl_primitive_create(&e->prim, pd)");
  prim_heap += (int64_t)mallinfo2().uordblks - (int64_t)heap0;
  const dnnl_memory_desc_t *sp = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  int64_t sp_bytes = sp ? (int64_t)dnnl_memory_desc_get_size(sp) : 0;
  if (sp_bytes > scratchpad_max) scratchpad_max = sp_bytes;
  e->nargs = nargs;
  for (int a = 0; a < nargs; a++) {
    const dnnl_memory_desc_t *md =
        dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, args[a]);
    if (!md) die(what, "argument has no memory descriptor");
    e->arg[a] = args[a];
    DNNL_CHECK(dnnl_memory_create(&e->mem[a], md, eng, DNNL_MEMORY_NONE), what);
    if (!plain || dnnl_memory_desc_equal(md, &plain[a])) continue;
    dnnl_primitive_desc_t rpd;
    const dnnl_memory_desc_t *from = is_output(args[a]) ? md : &plain[a];
    const dnnl_memory_desc_t *to = is_output(args[a]) ? &plain[a] : md;
    DNNL_CHECK(dnnl_reorder_primitive_desc_create(&rpd, from, eng, to, eng, NULL), what);
    guard_on(what, "creating", guard_shape);
    st = dnnl_primitive_create(&e->reo[a], rpd);
    guard_off();
    if (st != dnnl_success) dnnl_fail(st, what, __LINE__, "dnnl_primitive_create(&e->reo[a], rpd)");
    DNNL_CHECK(dnnl_primitive_desc_destroy(rpd), what);
    DNNL_CHECK(dnnl_memory_create(&e->user[a], &plain[a], eng, DNNL_MEMORY_NONE), what);
    e->bytes[a] = dnnl_memory_desc_get_size(md);
  }
  DNNL_CHECK(dnnl_primitive_desc_destroy(pd), what);
}

static void *layout_get(int a, size_t bytes, const char *what) {
  if (bytes > layout_cap[a]) {
    free(layout_buf[a]);
    layout_buf[a] = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!layout_buf[a]) mmrt_die_oom("a convolution's blocked-layout copy", (bytes + 63) / 64 * 64);
    layout_cap[a] = bytes;
  }
  return layout_buf[a];
}

static void reorder_run(Entry *e, int a, const char *what) {
  dnnl_exec_arg_t ex[2] = {{DNNL_ARG_FROM, is_output(e->arg[a]) ? e->mem[a] : e->user[a]},
                           {DNNL_ARG_TO, is_output(e->arg[a]) ? e->user[a] : e->mem[a]}};
  DNNL_CHECK(dnnl_primitive_execute(e->reo[a], stream, 2, ex), what);
}

/* Run a cached primitive on the given handles (same order as its args). */
static void entry_run(Entry *e, void *const *ptrs, const char *what) {
  size_t heap0 = e->ran ? 0 : mallinfo2().uordblks;
  if (!e->ran) guard_on(what, "first running", e->shape); /* its reorders too */
  dnnl_exec_arg_t ex[MAX_ARGS];
  for (int a = 0; a < e->nargs; a++) {
    ex[a].arg = e->arg[a];
    ex[a].memory = e->mem[a];
    if (!e->reo[a]) {
      DNNL_CHECK(dnnl_memory_set_data_handle(e->mem[a], ptrs[a]), what);
      continue;
    }
    DNNL_CHECK(dnnl_memory_set_data_handle(e->mem[a], layout_get(a, e->bytes[a], what)), what);
    DNNL_CHECK(dnnl_memory_set_data_handle(e->user[a], ptrs[a]), what);
    if (!is_output(e->arg[a])) reorder_run(e, a, what);
  }
  DNNL_CHECK(dnnl_primitive_execute(e->prim, stream, e->nargs, ex), what);
  for (int a = 0; a < e->nargs; a++)
    if (e->reo[a] && is_output(e->arg[a])) reorder_run(e, a, what);
  DNNL_CHECK(dnnl_stream_wait(stream), what);
  if (!e->ran) {
    guard_off(), e->ran = 1;
    prim_heap += (int64_t)mallinfo2().uordblks - (int64_t)heap0;
  }
}

/* A key from its values (kind, dtype, then shape and flags; the rest 0). */
static Key key_of(const int64_t *v, size_t n) {
  Key k = {{0}};
  memcpy(k.v, v, n * sizeof *v);
  return k;
}
#define KEY(...)                                                                                   \
  key_of((const int64_t[]){__VA_ARGS__}, sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t))

/* Caches the primitive of op descriptor `desc` (attributes `attr` or NULL)
 * under key k: with the forward primitive of `fwd` as its hint when fwd is
 * not NULL (a backward primitive), and one memory object per listed
 * argument. */
static Entry *cache_make_laid(const Key *k, const void *desc, const_dnnl_primitive_attr_t attr,
                              const void *fwd, int nargs, const int *args,
                              const dnnl_memory_desc_t *plain, const char *what) {
  dnnl_primitive_desc_t hint = NULL, pd;
  if (fwd) DNNL_CHECK(dnnl_primitive_desc_create(&hint, fwd, NULL, eng, NULL), what);
  DNNL_CHECK(dnnl_primitive_desc_create(&pd, desc, attr, eng, hint), what);
  if (hint) dnnl_primitive_desc_destroy(hint);
  Entry *e = cache_insert(k);
  entry_build(e, pd, nargs, args, plain, what);
  return e;
}

static Entry *cache_make(const Key *k, const void *desc, const_dnnl_primitive_attr_t attr,
                         const void *fwd, int nargs, const int *args, const char *what) {
  return cache_make_laid(k, desc, attr, fwd, nargs, args, NULL, what);
}

/* Runs e on ptrs, whose slot `out` is the result dst of n floats: with
 * accumulate, into scratch and then added to dst. */
static void run_into(Entry *e, void **ptrs, int out, float *dst, size_t n, int accumulate,
                     const char *what) {
  ptrs[out] = accumulate ? get_scratch(n) : dst;
  entry_run(e, ptrs, what);
  if (accumulate) add_into(dst, ptrs[out], n);
}

static void md_strided(dnnl_memory_desc_t *md, int nd, const dnnl_dims_t dims, dnnl_data_type_t t,
                       const dnnl_dims_t strides, const char *what) {
  DNNL_CHECK(dnnl_memory_desc_init_by_strides(md, nd, dims, t, strides), what);
}

/* Plain row-major descriptor. */
static void md_plain(dnnl_memory_desc_t *md, int nd, const dnnl_dims_t dims, dnnl_data_type_t t,
                     const char *what) {
  dnnl_dims_t st;
  int64_t s = 1;
  for (int i = nd - 1; i >= 0; i--) {
    st[i] = s;
    s *= dims[i];
  }
  md_strided(md, nd, dims, t, st, what);
}

/* ---- matmul ------------------------------------------------------------ */

static uint32_t float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

/* ---- bf16: native oneDNN primitives, or emulated (mmrt_bf16.c) ---- */

static float *widen_tmp(int slot, const void *x, size_t n) {
  float *t = mmrt_bf16_tmp(slot, n);
  mmrt_bf16_to_f32(t, x, n);
  return t;
}

/* The f32 buffer a bf16 result of n elements is computed into (holding its
 * current values when the kernel accumulates). */
static float *result_tmp(int slot, const void *y, size_t n, int accumulate) {
  return accumulate ? widen_tmp(slot, y, n) : mmrt_bf16_tmp(slot, n);
}

static void matmul_impl(MmrtDtype dt, void *C, const void *A, const void *B, const void *bias,
                        const float *addend, int batch, int M, int N, int K, float alpha,
                        int flags);

/* bf16 by fp32 primitives: operands widened, the result rounded (f32out:
 * an f32 result and bias, kept as they are) */
static void matmul_emulated(void *C, const void *A, const void *B, const void *bias,
                            const float *addend, int batch, int M, int N, int K, float alpha,
                            int flags, int f32out) {
  size_t na = (size_t)batch * M * K, nb = (size_t)((flags & MMRT_MM_BCAST_B) ? 1 : batch) * K * N;
  size_t nc = (size_t)batch * M * N;
  float *c = f32out ? C : result_tmp(2, C, nc, flags & MMRT_MM_ACCUM);
  const void *b = bias && !f32out ? widen_tmp(3, bias, (size_t)N) : bias;
  matmul_impl(MMRT_F32, c, widen_tmp(0, A, na), widen_tmp(1, B, nb), b, addend, batch, M, N, K,
              alpha, flags);
  if (!f32out) mmrt_f32_to_bf16(C, c, nc);
}

/* C = alpha * op(A) op(B) (+ bias) (+ C) (+ addend). bias: (N) or NULL;
 * addend: an f32 tensor of C's shape (an f32 C only) added by the kernel (a
 * binary post-op), or NULL. MMRT_BF16_F32: bf16 A and B, f32 C and bias. */
static void matmul_impl(MmrtDtype dt, void *C, const void *A, const void *B, const void *bias,
                        const float *addend, int batch, int M, int N, int K, float alpha,
                        int flags) {
  static const char *what = "mmrt_matmul";
  int f32out = dt == MMRT_BF16_F32;
  dnnl_data_type_t t = dnnl_dt(f32out ? MMRT_BF16 : dt, what), tc = f32out ? dnnl_f32 : t;
  if (batch < 1 || M < 1 || N < 1 || K < 1) die(what, "non-positive dimension");
  if (addend && tc != dnnl_f32) die(what, "an addend needs an f32 result");
  if ((dt == MMRT_BF16 || f32out) && !mmrt_bf16_native()) {
    matmul_emulated(C, A, B, bias, addend, batch, M, N, K, alpha, flags, f32out);
    return;
  }
  ensure_engine();
  Key k = KEY(K_MATMUL, dt, batch, M, N, K, flags, float_bits(alpha), bias != NULL, addend != NULL);
  Entry *e = cache_find(&k);
  if (!e) {
    int64_t bb = (flags & MMRT_MM_BCAST_B) ? 1 : batch;
    dnnl_memory_desc_t a_md, b_md, c_md, bias_md;
    dnnl_dims_t ad = {batch, M, K}, bd = {bb, K, N}, cd = {batch, M, N};
    dnnl_dims_t as = {(int64_t)M * K, K, 1}, bs = {(int64_t)K * N, N, 1};
    if (flags & MMRT_MM_TRANS_A) {
      as[1] = 1;
      as[2] = M;
    }
    if (flags & MMRT_MM_TRANS_B) {
      bs[1] = 1;
      bs[2] = K;
    }
    md_strided(&a_md, 3, ad, t, as, what);
    md_strided(&b_md, 3, bd, t, bs, what);
    md_plain(&c_md, 3, cd, tc, what);
    if (bias) {
      dnnl_dims_t bsd = {1, 1, N};
      md_plain(&bias_md, 3, bsd, tc, what);
    }
    dnnl_matmul_desc_t desc;
    DNNL_CHECK(dnnl_matmul_desc_init(&desc, &a_md, &b_md, bias ? &bias_md : NULL, &c_md), what);
    dnnl_primitive_attr_t attr;
    DNNL_CHECK(dnnl_primitive_attr_create(&attr), what);
    if (alpha != 1.0f) DNNL_CHECK(dnnl_primitive_attr_set_output_scales(attr, 1, 0, &alpha), what);
    if ((flags & MMRT_MM_ACCUM) || addend) {
      dnnl_post_ops_t po;
      DNNL_CHECK(dnnl_post_ops_create(&po), what);
      if (flags & MMRT_MM_ACCUM) DNNL_CHECK(dnnl_post_ops_append_sum(po, 1.0f), what);
      if (addend) DNNL_CHECK(dnnl_post_ops_append_binary(po, dnnl_binary_add, &c_md), what);
      DNNL_CHECK(dnnl_primitive_attr_set_post_ops(attr, po), what);
      dnnl_post_ops_destroy(po);
    }
    /* the addend's argument: the last post-op's second source */
    int add_arg = DNNL_ARG_ATTR_MULTIPLE_POST_OP((flags & MMRT_MM_ACCUM) ? 1 : 0) | DNNL_ARG_SRC_1;
    int args[5] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST, bias ? DNNL_ARG_BIAS : add_arg,
                   add_arg};
    e = cache_make(&k, &desc, attr, NULL, 3 + (bias != NULL) + (addend != NULL), args, what);
    dnnl_primitive_attr_destroy(attr);
  }
  void *ptrs[5] = {(void *)A, (void *)B, C, bias ? (void *)bias : (void *)addend, (void *)addend};
  entry_run(e, ptrs, what);
}

void mmrt_matmul(MmrtDtype dt, void *C, const void *A, const void *B, int batch, int M, int N,
                 int K, float alpha, int flags) {
  matmul_impl(dt, C, A, B, NULL, NULL, batch, M, N, K, alpha, flags);
}

void mmrt_linear_fwd(MmrtDtype dt, void *y, const void *x, const void *w, const void *bias,
                     int rows, int K, int N) {
  matmul_impl(dt, y, x, w, bias, NULL, 1, rows, N, K, 1.0f, MMRT_MM_TRANS_B | MMRT_MM_BCAST_B);
}

/* fp32 linear gradients go to oneDNN's dnnl_sgemm instead of the matmul
 * primitive in two cases:
 * - over a wide output (N >= SGEMM_MIN_N: a language model's head over its
 *   vocabulary): on GPT-2's head (256 rows, 768 by 50,257) it took about
 *   25% less CPU for dx and 10% less for dw on Zen 4 (bench: 2 threads,
 *   passive waits, under load);
 * - a product of SGEMM_MIN_FLOP or more: the primitive gives the
 *   gradients' plain-layout operand to brgemm, which ran up to twice as
 *   slowly as sgemm when its rows are 12 KiB apart (3 x 4 KiB: the L1's
 *   sets alias). On a Xeon (AVX-512, 2 threads), GPT-2 124M's 256 rows:
 *   dx of the 3,072 -> 768 layer 8.6 ms against 4.0, its dw 5.4 against
 *   3.9, dx of the 768 -> 3,072 layer 4.4 against 3.6, dx of the
 *   attention's input 3.3 against 2.9; the others within 8% (the
 *   attention input's dw 2.9 against 3.1, the worst).
 * The threads split C's rows in fixed blocks (SGEMM_ROWS for the head,
 * SGEMM_BIG_ROWS otherwise: each block packs the whole other operand,
 * 4 blocks of 64 took 5.8 ms on that 3,072 -> 768 dx), each block one
 * single-threaded sgemm, so the bits are the same for any thread count:
 * left to itself, dnnl_sgemm on AVX2 (Zen 3) splits dx's 6 x 9 output's
 * 32,771-term sums between 2 threads, and 1 and 2 threads gave other bits.
 * dx sums its terms in another order than the primitive. */
enum { SGEMM_MIN_N = 32768, SGEMM_ROWS = 64, SGEMM_BIG_ROWS = 128 };
#define SGEMM_MIN_FLOP 1.34e8 /* 2 x 256 x 512 x 512 */

/* The row block of an fp32 gradient product C (M, N) = op(A) (M, K) B (K, N)
 * whose output is wide_n columns wide, or 0: the matmul primitive. */
static int sgemm_rows(int M, int N, int K, int wide_n) {
  if (M < 1 || N < 1 || K < 1) return 0;
  if (wide_n >= SGEMM_MIN_N) return SGEMM_ROWS;
  return 2.0 * M * N * K >= SGEMM_MIN_FLOP ? SGEMM_BIG_ROWS : 0;
}

static void sgemm(char ta, int M, int N, int K, float alpha, const float *A, int lda,
                  const float *B, float *C, int accumulate, int rows) {
  int blocks = (M + rows - 1) / rows;
#pragma omp parallel for schedule(dynamic, 1)
  for (int b = 0; b < blocks; b++) {
    int m0 = b * rows, m = M - m0 < rows ? M - m0 : rows;
    /* row m0 of op(A): row m0 of A ('N'), column m0 of A ('T') */
    const float *a = ta == 'N' ? A + (size_t)m0 * lda : A + m0;
    DNNL_CHECK(dnnl_sgemm(ta, 'N', m, N, K, alpha, a, lda, B, N, accumulate ? 1.0f : 0.0f,
                          C + (size_t)m0 * N, N),
               "mmrt_linear (dnnl_sgemm)");
  }
}

void mmrt_linear_bwd_data(MmrtDtype dt, void *dx, const void *dy, const void *w, int rows, int K,
                          int N, int accumulate) {
  /* dx (rows, K) = dy (rows, N) @ w (N, K) */
  int blk = dt == MMRT_F32 ? sgemm_rows(rows, K, N, N) : 0;
  if (blk) {
    sgemm('N', rows, K, N, 1.0f, dy, N, w, dx, accumulate, blk);
    return;
  }
  matmul_impl(dt, dx, dy, w, NULL, NULL, 1, rows, K, N, 1.0f,
              MMRT_MM_BCAST_B | (accumulate ? MMRT_MM_ACCUM : 0));
}

void mmrt_linear_bwd_weights(MmrtDtype dt, void *dw, void *dbias, const void *dy, const void *x,
                             int rows, int K, int N, int accumulate) {
  /* dw (N, K) = dy^T (N, rows) @ x (rows, K) */
  if (dbias && dt != MMRT_F32) die("mmrt_linear_bwd_weights", "a bias gradient is f32 only");
  mmrt_linear_bwd_weights_into(dt, dw, NULL, dy, x, rows, K, N, 1.0f, accumulate);
  if (dbias) mmrt_reduce_sum(dbias, dy, 1, rows, N, 0, accumulate);
}

void mmrt_linear_bwd_weights_into(MmrtDtype dt, void *dw, const float *addend, const void *dy,
                                  const void *x, int rows, int K, int N, float alpha,
                                  int accumulate) {
  int blk = dt == MMRT_F32 ? sgemm_rows(N, K, rows, N) : 0;
  if (blk) {
    /* the addend copied in first, then accumulated onto */
    if (addend) memcpy(dw, addend, sizeof(float) * (size_t)N * (size_t)K);
    sgemm('T', N, K, rows, alpha, dy, N, x, dw, accumulate || addend, blk);
  } else
    matmul_impl(dt, dw, dy, x, NULL, addend, 1, N, K, rows, alpha,
                MMRT_MM_TRANS_A | MMRT_MM_BCAST_B | (accumulate ? MMRT_MM_ACCUM : 0));
}

/* ---- convolution ------------------------------------------------------- */

int mmrt_conv_out_size(int in, int k, int stride, int pad_lo, int pad_hi) {
  return (in + pad_lo + pad_hi - k) / stride + 1;
}

typedef struct ConvMds {
  dnnl_memory_desc_t x, w, b, y; /* plain */
  dnnl_memory_desc_t xa, wa, ya; /* format any: the primitive's choice */
  dnnl_dims_t strides, pad_lo, pad_hi;
  int64_t xn, wn, yn; /* element counts */
} ConvMds;

static void conv_mds(const MmrtConv *cv, int nsp, dnnl_data_type_t t, ConvMds *m,
                     const char *what) {
  int g = cv->groups > 0 ? cv->groups : 1;
  if (cv->C % g || cv->OC % g) die(what, "channels not divisible by groups");
  dnnl_dims_t xd = {cv->N, cv->C}, yd = {cv->N, cv->OC}, wd, bd = {cv->OC};
  int wnd;
  if (g == 1) {
    wd[0] = cv->OC;
    wd[1] = cv->C;
    wnd = 2;
  } else {
    wd[0] = g;
    wd[1] = cv->OC / g;
    wd[2] = cv->C / g;
    wnd = 3;
  }
  m->xn = (int64_t)cv->N * cv->C;
  m->yn = (int64_t)cv->N * cv->OC;
  m->wn = (int64_t)cv->OC * (cv->C / g);
  for (int i = 0; i < nsp; i++) {
    int o = mmrt_conv_out_size(cv->in[i], cv->k[i], cv->stride[i], cv->pad_lo[i], cv->pad_hi[i]);
    if (o < 1 || cv->stride[i] < 1) die(what, "empty output or bad stride");
    xd[2 + i] = cv->in[i];
    yd[2 + i] = o;
    wd[wnd + i] = cv->k[i];
    m->strides[i] = cv->stride[i];
    m->pad_lo[i] = cv->pad_lo[i];
    m->pad_hi[i] = cv->pad_hi[i];
    m->xn *= cv->in[i];
    m->yn *= o;
    m->wn *= cv->k[i];
  }
  md_plain(&m->x, 2 + nsp, xd, t, what);
  md_plain(&m->y, 2 + nsp, yd, t, what);
  md_plain(&m->w, wnd + nsp, wd, t, what);
  md_plain(&m->b, 1, bd, t, what);
  DNNL_CHECK(dnnl_memory_desc_init_by_tag(&m->xa, 2 + nsp, xd, t, dnnl_format_tag_any), what);
  DNNL_CHECK(dnnl_memory_desc_init_by_tag(&m->ya, 2 + nsp, yd, t, dnnl_format_tag_any), what);
  DNNL_CHECK(dnnl_memory_desc_init_by_tag(&m->wa, wnd + nsp, wd, t, dnnl_format_tag_any), what);
}

static void conv_key(Key *k, int kind, MmrtDtype dt, const MmrtConv *cv, int nsp, int64_t extra) {
  memset(k, 0, sizeof *k);
  k->v[0] = kind;
  k->v[1] = dt;
  k->v[2] = nsp;
  k->v[3] = cv->N;
  k->v[4] = cv->C;
  k->v[5] = cv->OC;
  k->v[6] = cv->groups > 0 ? cv->groups : 1;
  k->v[7] = extra;
  for (int i = 0; i < nsp; i++) {
    k->v[8 + i] = cv->in[i];
    k->v[11 + i] = cv->k[i];
    k->v[14 + i] = cv->stride[i];
    k->v[17 + i] = cv->pad_lo[i];
    k->v[20 + i] = cv->pad_hi[i];
  }
}

static void conv_fwd_desc(dnnl_convolution_desc_t *d, ConvMds *m, int bias, const char *what) {
  DNNL_CHECK(dnnl_convolution_forward_desc_init(d, dnnl_forward_training, dnnl_convolution_direct,
                                                &m->xa, &m->wa, bias ? &m->b : NULL, &m->ya,
                                                m->strides, m->pad_lo, m->pad_hi),
             what);
}

static void conv_fwd(MmrtDtype dt, const MmrtConv *cv, int nsp, void *y, const void *x,
                     const void *w, const void *bias) {
  const char *what = nsp == 3 ? "mmrt_conv3d_fwd" : "mmrt_conv2d_fwd";
  dnnl_data_type_t t = dnnl_dt(dt, what);
  ensure_engine();
  if (dt == MMRT_BF16 && !mmrt_bf16_native()) {
    ConvMds m;
    conv_mds(cv, nsp, dnnl_f32, &m, what);
    float *fy = mmrt_bf16_tmp(2, (size_t)m.yn);
    conv_fwd(MMRT_F32, cv, nsp, fy, widen_tmp(0, x, (size_t)m.xn), widen_tmp(1, w, (size_t)m.wn),
             bias ? widen_tmp(3, bias, (size_t)cv->OC) : NULL);
    mmrt_f32_to_bf16(y, fy, (size_t)m.yn);
    return;
  }
  Key k;
  conv_key(&k, K_CONV_FWD, dt, cv, nsp, bias != NULL);
  Entry *e = cache_find(&k);
  if (!e) {
    ConvMds m;
    conv_mds(cv, nsp, t, &m, what);
    dnnl_convolution_desc_t d;
    conv_fwd_desc(&d, &m, bias != NULL, what);
    int args[4] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST, DNNL_ARG_BIAS};
    dnnl_memory_desc_t plain[4] = {m.x, m.w, m.y, m.b};
    e = cache_make_laid(&k, &d, NULL, NULL, bias ? 4 : 3, args, plain, what);
  }
  void *ptrs[4] = {(void *)x, (void *)w, y, (void *)bias};
  entry_run(e, ptrs, what);
}

static void conv_bwd_data(MmrtDtype dt, const MmrtConv *cv, int nsp, void *dx, const void *dy,
                          const void *w, int accumulate) {
  const char *what = nsp == 3 ? "mmrt_conv3d_bwd_data" : "mmrt_conv2d_bwd_data";
  dnnl_data_type_t t = dnnl_dt(dt, what);
  ensure_engine();
  ConvMds m;
  conv_mds(cv, nsp, t, &m, what);
  if (dt == MMRT_BF16 && (!mmrt_bf16_native() || accumulate)) { /* (a bf16 sum is rounded here) */
    float *fdx = result_tmp(2, dx, (size_t)m.xn, accumulate);
    conv_bwd_data(MMRT_F32, cv, nsp, fdx, widen_tmp(0, dy, (size_t)m.yn),
                  widen_tmp(1, w, (size_t)m.wn), accumulate);
    mmrt_f32_to_bf16(dx, fdx, (size_t)m.xn);
    return;
  }
  Key k;
  conv_key(&k, K_CONV_BWD_DATA, dt, cv, nsp, 0);
  Entry *e = cache_find(&k);
  if (!e) {
    dnnl_convolution_desc_t fd, bd;
    conv_fwd_desc(&fd, &m, 0, what);
    DNNL_CHECK(dnnl_convolution_backward_data_desc_init(&bd, dnnl_convolution_direct, &m.xa, &m.wa,
                                                        &m.ya, m.strides, m.pad_lo, m.pad_hi),
               what);
    int args[3] = {DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC};
    dnnl_memory_desc_t plain[3] = {m.y, m.w, m.x};
    e = cache_make_laid(&k, &bd, NULL, &fd, 3, args, plain, what);
  }
  void *ptrs[3] = {(void *)dy, (void *)w, NULL};
  run_into(e, ptrs, 2, dx, (size_t)m.xn, accumulate, what);
}

/* Whether a bf16 weight gradient runs faster as the fp32 primitive on the
 * widened operands: where oneDNN 2.6 runs it on AMX tiles, whose
 * backward-weights kernel costs ~30 us a call before any work, a product
 * of fewer than 1.5e7 multiply-adds (WF-VAE's 8x8x5 and 1x1x1
 * convolutions, its 8-channel ones below 32x32) takes less time in fp32,
 * unless widening x and dy (more than 120,000 values) costs more than that
 * saves: on a Xeon with AMX, WFVAEFit's 54 weight gradients a step took
 * 10.1 ms in bf16 and 11.4 ms in fp32 (oneDNN's verbose times), 7.9 ms
 * each on the faster of the two; so chosen, its batch-1 step's conv2d and
 * conv3d weight gradients take 10.9 against 11.8 ms (profile). */
static int bwd_w_in_f32(const ConvMds *m, const MmrtConv *cv) {
  static int amx = -1;
  if (amx < 0)
    amx = (dnnl_get_effective_cpu_isa() & dnnl_cpu_isa_avx512_core_amx) ==
          dnnl_cpu_isa_avx512_core_amx;
  double macs = (double)m->wn * (double)(m->yn / cv->OC);
  return amx && macs < 1.5e7 && m->xn + m->yn < 120000;
}

/* Whether cv tiles its input into disjoint patches (a ViT's patch
 * embedding): each stride its kernel's size, no padding, one group. */
static int patchifies(const MmrtConv *cv, int nsp) {
  if (cv->groups > 1) return 0;
  for (int i = 0; i < nsp; i++)
    if (cv->stride[i] != cv->k[i] || cv->pad_lo[i] || cv->pad_hi[i]) return 0;
  return 1;
}

/* A patchifying convolution's weight gradient as one product: dw (OC, C
 * k...) = dy's rows (N patches, OC)^T @ the patches (N patches, C k...),
 * both gathered into the blocked-layout buffers (the same accounting).
 * oneDNN 2.6's backward-weights kernel took 0.15 ms a call for
 * InternVL2Tiny's 7 x 7, stride 7, one-channel patch embedding on a Zen 3,
 * six times the forward's time; the product and its gathers take a
 * fraction of that. */
static void patch_bwd_weights(const MmrtConv *cv, int nsp, float *dw, float *dbias, const float *dy,
                              const float *x, int accumulate) {
  int64_t S = 1, K = 1, X = 1; /* patches an image, a kernel's positions, an input's */
  int o[3] = {1, 1, 1}, k[3] = {1, 1, 1}, in[3] = {1, 1, 1};
  for (int i = 0; i < nsp; i++) { /* right-aligned: (d, h, w) */
    int j = 3 - nsp + i;
    o[j] = mmrt_conv_out_size(cv->in[i], cv->k[i], cv->stride[i], 0, 0);
    k[j] = cv->k[i], in[j] = cv->in[i];
    S *= o[j], K *= k[j], X *= in[j];
  }
  int64_t N = cv->N, C = cv->C, OC = cv->OC, rows = N * S, CK = C * K;
  float *P = layout_get(0, sizeof(float) * (size_t)(rows * CK), "mmrt_conv_bwd_weights");
  float *Y = layout_get(1, sizeof(float) * (size_t)(rows * OC), "mmrt_conv_bwd_weights");
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; r++) {
    int64_t n = r / S, s = r % S;
    int64_t od = s / ((int64_t)o[1] * o[2]), oh = s / o[2] % o[1], ow = s % o[2];
    for (int64_t c = 0; c < OC; c++) Y[r * OC + c] = dy[(n * OC + c) * S + s];
    float *p = P + r * CK;
    for (int64_t c = 0; c < C; c++) {
      const float *xc = x + (n * C + c) * X;
      for (int kd = 0; kd < k[0]; kd++)
        for (int kh = 0; kh < k[1]; kh++) {
          const float *src =
              xc + ((od * k[0] + kd) * in[1] + oh * k[1] + kh) * (int64_t)in[2] + ow * k[2];
          memcpy(p, src, sizeof(float) * (size_t)k[2]);
          p += k[2];
        }
    }
  }
  mmrt_linear_bwd_weights_into(MMRT_F32, dw, NULL, Y, P, (int)rows, (int)CK, (int)OC, 1.0f,
                               accumulate);
  if (dbias) mmrt_reduce_sum(dbias, Y, 1, (int)rows, (int)OC, 0, accumulate);
}

static void conv_bwd_weights(MmrtDtype dt, const MmrtConv *cv, int nsp, void *dw, void *dbias,
                             const void *dy, const void *x, int accumulate) {
  const char *what = nsp == 3 ? "mmrt_conv3d_bwd_weights" : "mmrt_conv2d_bwd_weights";
  dnnl_data_type_t t = dnnl_dt(dt, what);
  ensure_engine();
  ConvMds m;
  conv_mds(cv, nsp, t, &m, what);
  int hasb = dbias != NULL;
  if (dt == MMRT_BF16 && (!mmrt_bf16_native() || accumulate || bwd_w_in_f32(&m, cv))) {
    float *fdw = result_tmp(2, dw, (size_t)m.wn, accumulate);
    float *fdb = hasb ? result_tmp(3, dbias, (size_t)cv->OC, accumulate) : NULL;
    conv_bwd_weights(MMRT_F32, cv, nsp, fdw, fdb, widen_tmp(0, dy, (size_t)m.yn),
                     widen_tmp(1, x, (size_t)m.xn), accumulate);
    mmrt_f32_to_bf16(dw, fdw, (size_t)m.wn);
    if (hasb) mmrt_f32_to_bf16(dbias, fdb, (size_t)cv->OC);
    return;
  }
  if (dt == MMRT_F32 && patchifies(cv, nsp)) {
    patch_bwd_weights(cv, nsp, dw, dbias, dy, x, accumulate);
    return;
  }
  Key k;
  conv_key(&k, K_CONV_BWD_WEIGHTS, dt, cv, nsp, hasb);
  Entry *e = cache_find(&k);
  if (!e) {
    dnnl_convolution_desc_t fd, bd;
    /* the primitive's own layouts, reordered from and to the plain ones:
     * plain layouts make oneDNN fall back to im2col + gemm, 2.5x the
     * forward's time on WF-VAE's 8 to 40 channels. The blocked kernel sums
     * in another order; WF-VAE's PyTorch parity (tests/wfvae.sh) holds
     * either way, within PyTorch's own float32-to-float64 spread. */
    conv_fwd_desc(&fd, &m, hasb, what);
    DNNL_CHECK(dnnl_convolution_backward_weights_desc_init(&bd, dnnl_convolution_direct, &m.xa,
                                                           &m.wa, hasb ? &m.b : NULL, &m.ya,
                                                           m.strides, m.pad_lo, m.pad_hi),
               what);
    int args[4] = {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_WEIGHTS, DNNL_ARG_DIFF_BIAS};
    dnnl_memory_desc_t plain[4] = {m.x, m.y, m.w, m.b};
    e = cache_make_laid(&k, &bd, NULL, &fd, hasb ? 4 : 3, args, plain, what);
  }
  float *ow = dw, *ob = dbias;
  if (accumulate) {
    ow = get_scratch((size_t)m.wn + (size_t)cv->OC);
    ob = ow + m.wn;
  }
  void *ptrs[4] = {(void *)x, (void *)dy, ow, ob};
  entry_run(e, ptrs, what);
  if (accumulate) {
    add_into(dw, ow, (size_t)m.wn);
    if (hasb) add_into(dbias, ob, (size_t)cv->OC);
  }
}

void mmrt_conv2d_fwd(MmrtDtype dt, const MmrtConv *cv, void *y, const void *x, const void *w,
                     const void *bias) {
  conv_fwd(dt, cv, 2, y, x, w, bias);
}

void mmrt_conv3d_fwd(MmrtDtype dt, const MmrtConv *cv, void *y, const void *x, const void *w,
                     const void *bias) {
  conv_fwd(dt, cv, 3, y, x, w, bias);
}

void mmrt_conv2d_bwd_data(MmrtDtype dt, const MmrtConv *cv, void *dx, const void *dy, const void *w,
                          int accumulate) {
  conv_bwd_data(dt, cv, 2, dx, dy, w, accumulate);
}

void mmrt_conv3d_bwd_data(MmrtDtype dt, const MmrtConv *cv, void *dx, const void *dy, const void *w,
                          int accumulate) {
  conv_bwd_data(dt, cv, 3, dx, dy, w, accumulate);
}

void mmrt_conv2d_bwd_weights(MmrtDtype dt, const MmrtConv *cv, void *dw, void *dbias,
                             const void *dy, const void *x, int accumulate) {
  conv_bwd_weights(dt, cv, 2, dw, dbias, dy, x, accumulate);
}

void mmrt_conv3d_bwd_weights(MmrtDtype dt, const MmrtConv *cv, void *dw, void *dbias,
                             const void *dy, const void *x, int accumulate) {
  conv_bwd_weights(dt, cv, 3, dw, dbias, dy, x, accumulate);
}

/* ---- softmax ----------------------------------------------------------- */

static void softmax_fwd_desc(dnnl_softmax_v2_desc_t *d, dnnl_memory_desc_t *md, const char *what) {
  DNNL_CHECK(
      dnnl_softmax_v2_forward_desc_init(d, dnnl_forward_training, dnnl_softmax_accurate, md, md, 1),
      what);
}

/* The cached forward or backward primitive of a row softmax of (rows, cols). */
static Entry *softmax_entry(int bwd, MmrtDtype dt, int rows, int cols, const char *what) {
  dnnl_data_type_t t = dnnl_f32_only(dt, what);
  ensure_engine();
  Key k = KEY(bwd ? K_SOFTMAX_BWD : K_SOFTMAX_FWD, dt, rows, cols);
  Entry *e = cache_find(&k);
  if (e) return e;
  dnnl_memory_desc_t md;
  dnnl_dims_t d2 = {rows, cols};
  md_plain(&md, 2, d2, t, what);
  dnnl_softmax_v2_desc_t fd, bd;
  softmax_fwd_desc(&fd, &md, what);
  if (!bwd)
    return cache_make(&k, &fd, NULL, NULL, 2, (const int[]){DNNL_ARG_SRC, DNNL_ARG_DST}, what);
  DNNL_CHECK(dnnl_softmax_v2_backward_desc_init(&bd, dnnl_softmax_accurate, &md, &md, &md, 1),
             what);
  int args[3] = {DNNL_ARG_DST, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_SRC};
  return cache_make(&k, &bd, NULL, &fd, 3, args, what);
}

void mmrt_softmax_fwd(MmrtDtype dt, void *y, const void *x, int rows, int cols) {
  static const char *what = "mmrt_softmax_fwd";
  void *ptrs[2] = {(void *)x, y};
  entry_run(softmax_entry(0, dt, rows, cols, what), ptrs, what);
}

void mmrt_softmax_bwd(MmrtDtype dt, void *dx, const void *dy, const void *y, int rows, int cols,
                      int accumulate) {
  static const char *what = "mmrt_softmax_bwd";
  void *ptrs[3] = {(void *)y, (void *)dy, NULL};
  run_into(softmax_entry(1, dt, rows, cols, what), ptrs, 2, dx, (size_t)rows * (size_t)cols,
           accumulate, what);
}

/* ---- eltwise ----------------------------------------------------------- */

const char *mmrt_act_name(MmrtAct act) {
  static const char *names[] = {
#define X(e, s, alg, alpha) [MMRT_ACT_##e] = s,
      MMRT_ACT_LIST(X)
#undef X
  };
  return (unsigned)act < MMRT_ACT_COUNT ? names[act] : "?";
}

/* oneDNN algorithm and alpha for each activation (MMRT_ACT_LIST). */
static void act_alg(MmrtAct act, dnnl_alg_kind_t *alg, float *alpha) {
  switch (act) {
#define X(e, s, a, al)                                                                             \
  case MMRT_ACT_##e: *alg = dnnl_eltwise_##a, *alpha = al; return;
    MMRT_ACT_LIST(X)
#undef X
    case MMRT_ACT_COUNT: break;
  }
  die("mmrt_eltwise", "unknown activation");
}

static void eltwise_fwd_desc(dnnl_eltwise_desc_t *d, MmrtAct act, dnnl_memory_desc_t *md,
                             const char *what) {
  dnnl_alg_kind_t alg;
  float alpha;
  act_alg(act, &alg, &alpha);
  DNNL_CHECK(dnnl_eltwise_forward_desc_init(d, dnnl_forward_training, alg, md, alpha, 0.0f), what);
}

/* The cached forward or backward primitive of activation `act` on n values. */
static Entry *eltwise_entry(int bwd, MmrtDtype dt, MmrtAct act, size_t n, const char *what) {
  dnnl_data_type_t t = dnnl_f32_only(dt, what);
  ensure_engine();
  Key k = KEY(bwd ? K_ELTWISE_BWD : K_ELTWISE_FWD, dt, act, (int64_t)n);
  Entry *e = cache_find(&k);
  if (e) return e;
  dnnl_memory_desc_t md;
  dnnl_dims_t d1 = {(int64_t)n};
  md_plain(&md, 1, d1, t, what);
  dnnl_eltwise_desc_t fd, bd;
  eltwise_fwd_desc(&fd, act, &md, what);
  if (!bwd)
    return cache_make(&k, &fd, NULL, NULL, 2, (const int[]){DNNL_ARG_SRC, DNNL_ARG_DST}, what);
  DNNL_CHECK(dnnl_eltwise_backward_desc_init(&bd, fd.alg_kind, &md, &md, fd.alpha, fd.beta), what);
  int args[3] = {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_SRC};
  return cache_make(&k, &bd, NULL, &fd, 3, args, what);
}

void mmrt_eltwise_fwd(MmrtDtype dt, MmrtAct act, void *y, const void *x, size_t n) {
  static const char *what = "mmrt_eltwise_fwd";
  if (n == 0) {
    (void)dnnl_f32_only(dt, what);
    return;
  }
  void *ptrs[2] = {(void *)x, y};
  entry_run(eltwise_entry(0, dt, act, n, what), ptrs, what);
}

void mmrt_eltwise_bwd(MmrtDtype dt, MmrtAct act, void *dx, const void *dy, const void *x, size_t n,
                      int accumulate) {
  static const char *what = "mmrt_eltwise_bwd";
  if (n == 0) {
    (void)dnnl_f32_only(dt, what);
    return;
  }
  void *ptrs[3] = {(void *)x, (void *)dy, NULL};
  run_into(eltwise_entry(1, dt, act, n, what), ptrs, 2, dx, n, accumulate, what);
}
