/* mmc plan --device and mmc calibrate: tools/mmc_predict.h. */
#include "mmc_predict.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "passes/cost.h"
#include "passes/memplan.h"
#include "passes/pp_stage.h"
#include <stdlib.h>

static void add_d(json_object *o, const char *k, double v) {
  json_object_object_add(o, k, json_object_new_double(v));
}

bool mmc_predict(IrModule *m, const MmDevice *d, int64_t peak, json_object *root) {
  CostPrediction c;
  char err[512];
  if (!cost_predict(m, d, &c, err, sizeof err)) {
    fprintf(stderr, "mmc: error: predicting the step on %s: %s\n", d->name, err);
    return false;
  }
  double cap = d->mem_gb * 1e9;
  bool fits = (double)peak <= cap;
  if (root) {
    json_object *p = json_object_new_object(), *b = json_object_new_object();
    json_object_object_add(p, "device", json_object_new_string(d->name));
    json_object_object_add(p, "device_file", json_object_new_string(d->path));
    json_object_object_add(p, "devices", json_object_new_int(c.devices));
    add_d(p, "step_s", c.step_s);
    add_d(p, "tflops_per_device", c.tflops_per_device);
    add_d(p, "mfu", c.mfu);
    add_d(b, "compute_s", c.compute_s);
    add_d(b, "exposed_comm_s", c.exposed_comm_s);
    add_d(b, "bubble_s", c.bubble_s);
    add_d(b, "optimizer_s", c.optimizer_s);
    json_object_object_add(p, "breakdown", b);
    add_d(p, "comm_s", c.comm_s);
    add_d(p, "flops_per_step", c.flops_step);
    add_d(p, "model_flops_per_step", c.model_flops);
    json_object_object_add(p, "samples_per_step", json_object_new_int64(c.samples));
    add_d(p, "samples_per_s", c.step_s > 0 ? (double)c.samples / c.step_s : 0);
    if (c.tokens) {
      json_object_object_add(p, "tokens_per_step", json_object_new_int64(c.tokens));
      add_d(p, "tokens_per_s", c.step_s > 0 ? (double)c.tokens / c.step_s : 0);
    }
    json_object_object_add(p, "memory_bytes", json_object_new_int64(peak));
    add_d(p, "memory_capacity_bytes", cap);
    json_object_object_add(p, "fits", json_object_new_boolean(fits));
    json_object_object_add(root, "predicted", p);
    return true;
  }
  printf("predicted on %d x %s (%s):\n", c.devices, d->name, d->path);
  printf("  step %.6g s: compute %.4g s, exposed communication %.4g s, bubble %.4g s, "
         "optimizer %.4g s (all communication %.4g s)\n",
         c.step_s, c.compute_s, c.exposed_comm_s, c.bubble_s, c.optimizer_s, c.comm_s);
  if (c.tokens)
    printf("  throughput %.6g tokens/s (%lld tokens a step), %.6g samples/s\n",
           (double)c.tokens / c.step_s, (long long)c.tokens, (double)c.samples / c.step_s);
  else
    printf("  throughput %.6g samples/s (%lld samples a step)\n", (double)c.samples / c.step_s,
           (long long)c.samples);
  printf("  %.4g TFLOP/s per device executed (recompute included), MFU %.1f%% of %g TFLOP/s\n",
         c.tflops_per_device, 100 * c.mfu, c.peak_tflops);
  printf("  memory per rank %.3f GB of %.3g GB: %s\n", (double)peak / 1e9, d->mem_gb,
         fits ? "fits" : "DOES NOT FIT");
  return true;
}

bool mmc_predict_step(IrModule *m, const MmDevice *d, double *step_s) {
  CostPrediction c;
  char err[512];
  *step_s = 0;
  if (!ir_module_func(m, "train")) return true;
  if (!cost_predict(m, d, &c, err, sizeof err)) {
    fprintf(stderr, "mmc: error: predicting the step on %s: %s\n", d->name, err);
    return false;
  }
  *step_s = c.step_s;
  return true;
}

int mmc_calibrate(int argc, char **argv) {
  char self[PATH_MAX], tool[PATH_MAX + 32];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) {
    fprintf(stderr, "mmc: calibrate: cannot find mmc's own folder\n");
    return 2;
  }
  self[n] = 0;
  char *slash = strrchr(self, '/');
  if (slash) *slash = 0;
  snprintf(tool, sizeof tool, "%s/mmc-calibrate", self);
  argv[1] = tool;
  (void)argc;
  execv(tool, argv + 1);
  fprintf(stderr, "mmc: calibrate: cannot run '%s': %s\n", tool, strerror(errno));
  return 2;
}

/* ---- mmc plan --search ---- */

typedef struct {
  int tp, pp, cp, dp, zero, rc, mb;
  double step_s, mfu, tflops;
  int64_t mem;
} Cand;

typedef struct {
  char why[160];
  int n;
} Drop;

static int cmp_cand(const void *a, const void *b) {
  const Cand *x = a, *y = b;
  return x->step_s < y->step_s ? -1 : x->step_s > y->step_s;
}

static void drop(Drop *d, int *nd, const char *why) {
  for (int i = 0; i < *nd; i++)
    if (!strcmp(d[i].why, why)) {
      d[i].n++;
      return;
    }
  if (*nd < 64) {
    snprintf(d[*nd].why, sizeof d[*nd].why, "%s", why);
    d[(*nd)++].n = 1;
  }
}

/* "file:1:2: error: data parallel: dp = 3 ..." -> "data parallel: dp = N ..."
 * (digits folded, so that one reason counts every size it happens at) */
static void reason_of(const char *err, char *out, size_t n) {
  const char *e = strstr(err, "error: ");
  e = e ? e + 7 : err;
  size_t k = 0;
  for (; *e && *e != '\n' && k + 2 < n; e++) {
    if (*e >= '0' && *e <= '9') {
      const char *r = e;
      while (r[1] >= '0' && r[1] <= '9') r++;
      bool word = (r[1] >= 'A' && r[1] <= 'Z') || (r[1] >= 'a' && r[1] <= 'z'); /* 1F1B */
      if (!word) {
        out[k++] = 'N';
        e = r;
        continue;
      }
    }
    out[k++] = *e;
  }
  out[k] = 0;
}

int mmc_search(const MmDevice *d, int devices, const MmPlanFlags *given, MmcBuildFn build,
               MmcReleaseFn release, void *user, int top) {
  static const int rcs[] = {MM_RECOMPUTE_NONE, MM_RECOMPUTE_SELECTIVE, MM_RECOMPUTE_FULL};
  static const int zeros[] = {0, 1, 3};
  Cand *c = NULL;
  int nc = 0, cap = 0, tried = 0, ndrop = 0;
  Drop drops[64];
  for (int tp = 1; tp <= devices && tp <= d->devices_per_node; tp *= 2)
    for (int pp = 1; tp * pp <= devices; pp *= 2)
      for (int cp = 1; tp * pp * cp <= devices && cp <= 8; cp *= 2) {
        if (devices % (tp * pp * cp)) continue;
        int dp = devices / (tp * pp * cp);
        int mbs[4] = {1, pp, 2 * pp, 4 * pp};
        for (int zi = 0; zi < 3; zi++)
          for (int ri = 0; ri < 3; ri++)
            for (int mi = 0; mi < 4; mi++) {
              if (mi > 0 && mbs[mi] == mbs[mi - 1]) continue;
              if (zeros[zi] && dp == 1) continue;
              MmPlanFlags f = *given;
#define FIX(ID, field, v)                                                                          \
  if (!f.given[MM_SET_##ID])                                                                       \
    f.plan.field = (v), f.given[MM_SET_##ID] = true;                                               \
  else if (f.plan.field != (v))                                                                    \
    continue;
              FIX(TP, tp, tp)
              FIX(PP, pp, pp)
              FIX(CP, cp, cp)
              FIX(DP, dp, dp)
              FIX(ZERO, zero, zeros[zi])
              FIX(RECOMPUTE, recompute, (MmRecompute)rcs[ri])
              FIX(MICRO_BATCHES, micro_batches, mbs[mi])
#undef FIX
              tried++;
              char err[512] = "", why[160];
              void *h = NULL;
              IrModule *m = build(user, &f, &h, err, sizeof err);
              if (!m) {
                reason_of(err[0] ? err : "refused", why, sizeof why);
                drop(drops, &ndrop, why);
                release(user, h);
                continue;
              }
              CostPrediction p;
              int64_t mem = 0;
              MpSummary s;
              if (mp_summarize(m, &s, err, sizeof err)) mem = s.total;
              if (m->plan.pp > 1 && m->plan.pp <= 64) {
                PpRankMem pm[64];
                if (pp_rank_memory(m, pm, 64, err, sizeof err))
                  for (int r = 0; r < m->plan.pp; r++)
                    if (pm[r].peak > mem) mem = pm[r].peak;
              }
              if ((double)mem > d->mem_gb * 1e9) {
                drop(drops, &ndrop, "does not fit the device's memory");
              } else if (!cost_predict(m, d, &p, err, sizeof err)) {
                reason_of(err, why, sizeof why);
                drop(drops, &ndrop, why);
              } else {
                if (nc == cap) {
                  cap = cap ? 2 * cap : 64;
                  Cand *nn = realloc(c, (size_t)cap * sizeof *c);
                  if (!nn) {
                    release(user, h);
                    free(c);
                    fprintf(stderr, "mmc: out of memory\n");
                    return 1;
                  }
                  c = nn;
                }
                c[nc++] = (Cand){tp,      pp,      cp,       dp,    zeros[zi],
                                 rcs[ri], mbs[mi], p.step_s, p.mfu, p.tflops_per_device,
                                 mem};
              }
              release(user, h);
            }
      }
  qsort(c, (size_t)nc, sizeof *c, cmp_cand);
  printf("search on %d x %s: %d plans tried, %d ranked, %d dropped\n", devices, d->name, tried, nc,
         tried - nc);
  for (int i = 0; i < ndrop; i++) printf("  dropped %4d: %s\n", drops[i].n, drops[i].why);
  for (int i = 0; i < nc && i < top; i++) {
    const Cand *x = &c[i];
    printf("#%d  step %.6g s (%.3gx the best), MFU %.1f%%, %.4g TFLOP/s per device, memory %.3f "
           "GB per rank\n",
           i + 1, x->step_s, x->step_s / c[0].step_s, 100 * x->mfu, x->tflops,
           (double)x->mem / 1e9);
    printf("  parallel { tp = %d; pp = %d; cp = %d; dp = %d; zero = %d; recompute = %s; "
           "micro_batches = %d }\n",
           x->tp, x->pp, x->cp, x->dp, x->zero, mm_recompute_names[x->rc], x->mb);
  }
  free(c);
  if (!nc) fprintf(stderr, "mmc: error: --search: no plan fits and divides\n");
  return nc ? 0 : 1;
}
