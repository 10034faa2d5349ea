/* mmc plan --device and mmc calibrate: tools/mmc_predict.h. */
#include "mmc_predict.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "passes/cost.h"

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
