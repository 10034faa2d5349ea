/* Device descriptions: support/device.h. */
#include "device.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#ifndef MMC_DEVICES_DIR
#define MMC_DEVICES_DIR "devices"
#endif

typedef struct {
  const char *key;
  size_t off;
  int required;
  double lo, hi;
  const char *help;
} DevKey;

static const DevKey keys[] = {
#define MM_DEV_ROW(f, k, req, lo, hi, help) {k, offsetof(MmDevice, f), req, lo, hi, help},
    MM_DEVICE_KEYS(MM_DEV_ROW)
#undef MM_DEV_ROW
};
enum { NKEYS = sizeof keys / sizeof keys[0] };
/* each key's row in keys[], by field name (K_fp32_tflops, ...) */
enum {
#define MM_DEV_INDEX(f, k, req, lo, hi, help) K_##f,
  MM_DEVICE_KEYS(MM_DEV_INDEX)
#undef MM_DEV_INDEX
};

const char *mm_device_dir(void) {
  const char *e = getenv("MMC_DEVICES_DIR");
  return e && *e ? e : MMC_DEVICES_DIR;
}

static bool failf(char *err, size_t n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, n, fmt, ap);
  va_end(ap);
  return false;
}

static char *trim(char *s) {
  while (isspace((unsigned char)*s)) s++;
  size_t n = strlen(s);
  while (n && isspace((unsigned char)s[n - 1])) s[--n] = 0;
  return s;
}

bool mm_device_parse(const char *text, const char *file, MmDevice *d, char *err, size_t errn) {
  memset(d, 0, sizeof *d);
  bool seen[NKEYS] = {0}, named = false;
  int lineno = 0;
  const char *p = text;
  while (*p) {
    const char *e = strchr(p, '\n');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    lineno++;
    char line[1024];
    if (len >= sizeof line) return failf(err, errn, "%s:%d: line too long", file, lineno);
    memcpy(line, p, len);
    line[len] = 0;
    p += len + (e ? 1 : 0);
    char *hash = strchr(line, '#');
    if (hash) *hash = 0;
    char *s = trim(line);
    if (!*s) continue;
    char *eq = strchr(s, '=');
    if (!eq) return failf(err, errn, "%s:%d: expected 'key = value', got '%s'", file, lineno, s);
    *eq = 0;
    char *k = trim(s), *v = trim(eq + 1);
    if (!*v) return failf(err, errn, "%s:%d: '%s' has no value", file, lineno, k);
    if (strcmp(k, "name") == 0) {
      if (named) return failf(err, errn, "%s:%d: 'name' given twice", file, lineno);
      size_t vn = strlen(v);
      if (vn >= 2 && v[0] == '"' && v[vn - 1] == '"') v[vn - 1] = 0, v++;
      snprintf(d->name, sizeof d->name, "%s", v);
      named = true;
      continue;
    }
    int i = 0;
    while (i < NKEYS && strcmp(keys[i].key, k) != 0) i++;
    if (i == NKEYS) return failf(err, errn, "%s:%d: unknown key '%s'", file, lineno, k);
    if (seen[i]) return failf(err, errn, "%s:%d: '%s' given twice", file, lineno, k);
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (end == v || *trim(end) || errno || !isfinite(x))
      return failf(err, errn, "%s:%d: '%s' = '%s' is not a number", file, lineno, k, v);
    if (x < keys[i].lo || x > keys[i].hi)
      return failf(err, errn, "%s:%d: '%s' = %g is out of range [%g, %g] (%s)", file, lineno, k, x,
                   keys[i].lo, keys[i].hi, keys[i].help);
    if (strcmp(k, "devices_per_node") == 0 && x != floor(x))
      return failf(err, errn, "%s:%d: devices_per_node = %g is not a whole number", file, lineno,
                   x);
    *(double *)((char *)d + keys[i].off) = x;
    seen[i] = true;
  }
  for (int i = 0; i < NKEYS; i++)
    if (keys[i].required && !seen[i])
      return failf(err, errn, "%s: missing required key '%s' (%s)", file, keys[i].key,
                   keys[i].help);
  if (!seen[K_vector_tflops]) d->vector_tflops = d->fp32_tflops;
  if (!seen[K_matmul_efficiency]) d->matmul_efficiency = 1;
  if (!seen[K_attention_efficiency]) d->attention_efficiency = 1;
  if (!seen[K_matmul_overhead_us]) d->matmul_overhead_us = d->op_overhead_us;
  if (!seen[K_attention_overhead_us]) d->attention_overhead_us = d->op_overhead_us;
  if (!seen[K_conv_overhead_us]) d->conv_overhead_us = d->matmul_overhead_us;
  if (!seen[K_parallel_overhead_us]) d->parallel_overhead_us = d->op_overhead_us;
  if (!seen[K_cache_bw_gbs]) d->cache_bw_gbs = d->mem_bw_gbs;
  if (!seen[K_cold_bw_gbs]) d->cold_bw_gbs = d->cache_bw_gbs;
  if (!seen[K_llc_bw_gbs]) d->llc_bw_gbs = d->mem_bw_gbs;
  if (!seen[K_threads]) d->threads = 1;
  if (!named) {
    const char *b = strrchr(file, '/');
    snprintf(d->name, sizeof d->name, "%s", b ? b + 1 : file);
    char *dot = strrchr(d->name, '.');
    if (dot) *dot = 0;
  }
  return true;
}

bool mm_device_load(const char *spec, MmDevice *d, char *err, size_t errn) {
  char path[512];
  size_t n = strlen(spec);
  if (strchr(spec, '/') || (n > 4 && strcmp(spec + n - 4, ".dev") == 0))
    snprintf(path, sizeof path, "%s", spec);
  else {
    for (const char *c = spec; *c; c++)
      if (!isalnum((unsigned char)*c) && *c != '_' && *c != '-')
        return failf(err, errn, "device '%s': not a name (letters, digits, - and _) or a path",
                     spec);
    snprintf(path, sizeof path, "%s/%s.dev", mm_device_dir(), spec);
  }
  FILE *f = fopen(path, "rb");
  if (!f)
    return failf(err, errn, "cannot read device description '%s'%s", path,
                 strchr(spec, '/') ? "" : " (the built-in ones: a100, h100, 910b; or a path)");
  char *buf = NULL;
  size_t len = 0, cap = 0;
  for (;;) {
    if (len + 4096 + 1 > cap) {
      cap = cap ? 2 * cap : 8192;
      if (cap > (1u << 20)) {
        free(buf), fclose(f);
        return failf(err, errn, "%s: too large for a device description", path);
      }
      char *nb = realloc(buf, cap);
      if (!nb) {
        free(buf), fclose(f);
        return failf(err, errn, "%s: out of memory", path);
      }
      buf = nb;
    }
    size_t r = fread(buf + len, 1, 4096, f);
    len += r;
    if (r < 4096) break;
  }
  bool rd = !ferror(f);
  fclose(f);
  if (!rd) {
    free(buf);
    return failf(err, errn, "cannot read device description '%s'", path);
  }
  buf[len] = 0;
  if (memchr(buf, 0, len)) {
    free(buf);
    return failf(err, errn, "%s: not a text file", path);
  }
  bool ok = mm_device_parse(buf, path, d, err, errn);
  free(buf);
  if (ok) snprintf(d->path, sizeof d->path, "%s", path);
  return ok;
}

void mm_device_write(FILE *out, const MmDevice *d, const char *header) {
  if (header) fprintf(out, "%s", header);
  fprintf(out, "name = %s\n", d->name);
  for (int i = 0; i < NKEYS; i++) {
    fprintf(out, "%-20s = %.6g  # %s\n", keys[i].key,
            *(const double *)((const char *)d + keys[i].off), keys[i].help);
  }
}
