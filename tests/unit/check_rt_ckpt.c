/* check_rt_ckpt.c: safetensors round trips, the exact bytes of the format,
 * corrupt files, atomic writes under failure, checkpoint directories. */
#include <check.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tmpdir_fixture.h"
#include "mmrt_ckpt.h"

static void setup(void) {
  tmpdir_make("mmrt_ckpt");
}
static void teardown(void) {
  tmpdir_remove();
}

static char *tpath(const char *name) {
  static char buf[4][512];
  static int k;
  k = (k + 1) % 4;
  snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
  return buf[k];
}

static unsigned char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  ck_assert_msg(f != NULL, "cannot open %s", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *b = malloc((size_t)n + 1);
  ck_assert_int_eq(fread(b, 1, (size_t)n, f), n);
  fclose(f);
  *len = (size_t)n;
  return b;
}

static void spit(const char *path, const void *b, size_t n) {
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  ck_assert_int_eq(fwrite(b, 1, n, f), n);
  fclose(f);
}

/* No "*.tmp.*" file left in tmpdir. */
static void assert_no_temp(void) {
  DIR *d = opendir(tmpdir);
  struct dirent *e;
  while ((e = readdir(d)))
    ck_assert_msg(!strstr(e->d_name, ".tmp."), "temporary %s left behind", e->d_name);
  closedir(d);
}

/* A safetensors file from a header string and data bytes (header padded
 * with spaces to 8, as the Python writer does). */
static void write_raw(const char *path, const char *hdr, const void *data, size_t dlen) {
  size_t h = strlen(hdr), p = (h + 7) / 8 * 8;
  unsigned char *b = calloc(1, 8 + p + dlen);
  for (int k = 0; k < 8; k++) b[k] = (unsigned char)((uint64_t)p >> (8 * k));
  memcpy(b + 8, hdr, h);
  memset(b + 8 + h, ' ', p - h);
  if (dlen) memcpy(b + 8 + p, data, dlen);
  spit(path, b, 8 + p + dlen);
  free(b);
}

static void expect_open_fail(const char *path, int code, const char *n1, const char *n2) {
  MmrtStFile *f;
  char err[512] = "";
  int rc = mmrt_st_open(&f, path, err, sizeof err);
  ck_assert_msg(rc == code, "rc %d, expected %d: %s", rc, code, err);
  ck_assert_ptr_null(f);
  ck_assert_msg(strstr(err, path), "message '%s' does not name the file", err);
  ck_assert_msg(strstr(err, n1), "message '%s' lacks '%s'", err, n1);
  if (n2) ck_assert_msg(strstr(err, n2), "message '%s' lacks '%s'", err, n2);
  if (getenv("MMRT_SHOW_ERRORS")) fprintf(stderr, "%s\n", err);
}

START_TEST(round_trip_dtypes) {
  float f32[6] = {1, -2, 3.5f, 0, 1e-30f, 6};
  uint16_t bf16[5] = {0x3f80, 0xc000, 0x0000, 0x7f80, 0x1234};
  uint16_t f16[3] = {0x3c00, 0xbc00, 0x7bff};
  int32_t i32[4] = {1, -1, 2147483647, -2147483647 - 1};
  int64_t i64[3] = {1, -1, (int64_t)1 << 62};
  uint8_t u8[7] = {0, 1, 2, 3, 250, 255, 9};
  float scalar = 42.0f;
  MmrtTensorRef t[] = {
      {"u8", MMRT_ST_U8, 1, {7}, u8},           {"w.f32", MMRT_ST_F32, 2, {2, 3}, f32},
      {"bf16", MMRT_ST_BF16, 1, {5}, bf16},     {"f16", MMRT_ST_F16, 3, {1, 3, 1}, f16},
      {"i32", MMRT_ST_I32, 2, {2, 2}, i32},     {"i64", MMRT_ST_I64, 1, {3}, i64},
      {"scalar", MMRT_ST_F32, 0, {0}, &scalar}, {"empty", MMRT_ST_F32, 2, {0, 4}, NULL},
  };
  enum { NT = sizeof t / sizeof t[0] };
  MmrtKV meta[] = {{"step", "12"},
                   {"data_iter", "mmrt-iter v1 n=10 batch=2 shuffle=1 seed=1 "
                                 "epoch=0 pos=4"},
                   {"note", "a/b \"q\""}};
  char err[512];
  const char *path = tpath("x.safetensors");
  ck_assert_msg(mmrt_st_save(path, t, NT, meta, 3, err, sizeof err) == MMRT_OK, "%s", err);
  assert_no_temp();

  MmrtStFile *f;
  ck_assert_msg(mmrt_st_open(&f, path, err, sizeof err) == MMRT_OK, "%s", err);
  ck_assert_int_eq(mmrt_st_count(f), NT);
  ck_assert_str_eq(mmrt_st_path(f), path);
  /* data order: I64, then 4-byte, 2-byte, 1-byte, each aligned */
  ck_assert_str_eq(mmrt_st_name(f, 0), "i64");
  /* the order the trainer's --save-weights gathers in is the file's */
  int ord[NT], want[NT] = {5, 1, 4, 6, 7, 2, 3, 0};
  ck_assert_int_eq(mmrt_st_file_order(t, NT, ord), NT);
  for (int j = 0; j < NT; j++) {
    ck_assert_int_eq(ord[j], want[j]);
    ck_assert_str_eq(mmrt_st_name(f, j), t[ord[j]].name);
  }
  MmrtTensorRef odd[] = {{"a", MMRT_ST_U8, 0, {0}, u8}, {"b", MMRT_ST_NDTYPES, 0, {0}, u8}};
  ck_assert_int_eq(mmrt_st_file_order(odd, 2, ord), 1); /* an unknown dtype is left out */
  ck_assert_str_eq(mmrt_st_meta(f, "note"), "a/b \"q\"");
  ck_assert_ptr_null(mmrt_st_meta(f, "nope"));
  ck_assert_int_eq(mmrt_st_meta_count(f), 3);
  ck_assert_str_eq(mmrt_st_meta_at(f, 1).key, "data_iter");
  int64_t step;
  ck_assert_int_eq(mmrt_st_meta_int64(f, "step", &step, err, sizeof err), MMRT_OK);
  ck_assert_int_eq(step, 12);
  ck_assert_int_eq(mmrt_st_meta_int64(f, "note", &step, err, sizeof err), MMRT_ERR_FORMAT);
  ck_assert_int_eq(mmrt_st_meta_int64(f, "opt_step", &step, err, sizeof err), MMRT_ERR_NOTFOUND);
  ck_assert_msg(strstr(err, "'opt_step' is missing"), "%s", err);

  int i = mmrt_st_find(f, "f16");
  MmrtStDtype dt;
  int nd;
  const int64_t *sh;
  mmrt_st_info(f, i, &dt, &nd, &sh);
  ck_assert(dt == MMRT_ST_F16 && nd == 3 && sh[0] == 1 && sh[1] == 3 && sh[2] == 1);
  ck_assert_int_eq(mmrt_st_find(f, "missing"), -1);

  /* read back into fresh buffers */
  unsigned char back[NT][64];
  MmrtTensorRef r[NT];
  for (int k = 0; k < NT; k++) {
    r[k] = t[k];
    r[k].data = back[k];
    memset(back[k], 0xAA, sizeof back[k]);
  }
  ck_assert_msg(mmrt_st_read_all(f, r, NT, 1, err, sizeof err) == MMRT_OK, "%s", err);
  for (int k = 0; k < NT; k++) {
    size_t n = mmrt_tensor_bytes(&t[k]);
    if (n) ck_assert_msg(memcmp(back[k], t[k].data, n) == 0, "tensor %s differs", t[k].name);
    ck_assert_int_eq(back[k][n], 0xAA); /* nothing written past the end */
  }
  mmrt_st_close(f);

  /* the file: header length multiple of 8, every tensor aligned */
  size_t len;
  unsigned char *b = slurp(path, &len);
  uint64_t n = 0;
  for (int k = 7; k >= 0; k--) n = n << 8 | b[k];
  ck_assert_int_eq(n % 8, 0);
  ck_assert_int_eq(b[8], '{');
  free(b);
}
END_TEST

/* The exact bytes the reference (Python/Rust) writer produces for
 * save_file({"b": int64 [7], "a": float32 [1, 2]}, metadata={"format": "pt"}):
 * tensors sorted by alignment then name, compact JSON, space padding. */
START_TEST(reference_bytes) {
  const char *hdr = "{\"__metadata__\":{\"format\":\"pt\"},"
                    "\"b\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]},"
                    "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}";
  unsigned char data[16] = {7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x80, 0x3f, 0, 0, 0, 0x40};
  const char *ref = tpath("ref.safetensors");
  write_raw(ref, hdr, data, sizeof data);

  char err[512];
  MmrtStFile *f;
  ck_assert_msg(mmrt_st_open(&f, ref, err, sizeof err) == MMRT_OK, "%s", err);
  float a[2];
  int64_t bv;
  MmrtTensorRef want[] = {{"a", MMRT_ST_F32, 1, {2}, a}, {"b", MMRT_ST_I64, 1, {1}, &bv}};
  ck_assert_msg(mmrt_st_read_all(f, want, 2, 1, err, sizeof err) == MMRT_OK, "%s", err);
  ck_assert(a[0] == 1.0f && a[1] == 2.0f && bv == 7);
  ck_assert_str_eq(mmrt_st_meta(f, "format"), "pt");
  mmrt_st_close(f);

  /* and we write the same bytes */
  int64_t b7 = 7;
  float a12[2] = {1, 2};
  MmrtTensorRef t[] = {{"b", MMRT_ST_I64, 1, {1}, &b7}, {"a", MMRT_ST_F32, 1, {2}, a12}};
  MmrtKV meta[] = {{"format", "pt"}};
  const char *ours = tpath("ours.safetensors");
  ck_assert_int_eq(mmrt_st_save(ours, t, 2, meta, 1, err, sizeof err), MMRT_OK);
  size_t l1, l2;
  unsigned char *b1 = slurp(ref, &l1), *b2 = slurp(ours, &l2);
  ck_assert_uint_eq(l1, l2);
  ck_assert_msg(memcmp(b1, b2, l1) == 0, "header ours: %.*s", (int)l2 - 8, b2 + 8);
  free(b1);
  free(b2);

  /* a file with no metadata and no tensors: "{}" padded */
  write_raw(ref, "{}", NULL, 0);
  ck_assert_int_eq(mmrt_st_open(&f, ref, err, sizeof err), MMRT_OK);
  ck_assert_int_eq(mmrt_st_count(f), 0);
  mmrt_st_close(f);
}
END_TEST

START_TEST(corrupt_files) {
  float d[4] = {1, 2, 3, 4};
  const char *p = tpath("bad.safetensors");
  const char *ok = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}";

  spit(p, "\x10\0\0", 3);
  expect_open_fail(p, MMRT_ERR_FORMAT, "too short for the 8-byte header length", NULL);

  write_raw(p, ok, d, 16);
  size_t len;
  unsigned char *b = slurp(p, &len);
  spit(p, b, len - 3); /* truncated data */
  expect_open_fail(p, MMRT_ERR_FORMAT, "tensor 'w'", "extend past the 13-byte data area");
  spit(p, b, 8 + 20); /* truncated inside the header */
  expect_open_fail(p, MMRT_ERR_FORMAT, "header length 64 exceeds the 20 bytes", NULL);
  b[0] = 0xff, b[5] = 1; /* absurd header length */
  spit(p, b, len);
  expect_open_fail(p, MMRT_ERR_FORMAT, "exceeds the", NULL);
  free(b);

  write_raw(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]", d, 16);
  expect_open_fail(p, MMRT_ERR_FORMAT, "header JSON does not parse", NULL);
  write_raw(p, "{\"w\":{\"dtype\":\"F32\",, }}", d, 16);
  expect_open_fail(p, MMRT_ERR_FORMAT, "header JSON does not parse", NULL);
  write_raw(p, "[1,2]", d, 16);
  expect_open_fail(p, MMRT_ERR_FORMAT, "does not start with '{'", NULL);
  write_raw(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}} x", d, 16);
  expect_open_fail(p, MMRT_ERR_FORMAT, "bytes after its JSON object", NULL);

  write_raw(p, "{\"w\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]}}", d, 16);
  expect_open_fail(p, MMRT_ERR_FORMAT, "tensor 'w': dtype 'F64' not supported", NULL);
  write_raw(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,16]}}", d, 16);
  expect_open_fail(p, MMRT_ERR_FORMAT, "tensor 'w': F32 [2, 3] needs 24 bytes", "span 16");
  write_raw(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,-2],\"data_offsets\":[0,16]}}", d, 16);
  expect_open_fail(p, MMRT_ERR_FORMAT, "tensor 'w': shape[1]", NULL);
  write_raw(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[16,32]}}", d, 16);
  expect_open_fail(p, MMRT_ERR_FORMAT, "tensor 'w': data_offsets [16, 32) extend past", NULL);
  write_raw(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", d, 16);
  expect_open_fail(p, MMRT_ERR_FORMAT, "end before they begin", NULL);
  write_raw(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", d, 16);
  expect_open_fail(p, MMRT_ERR_FORMAT, "tensor 'w': expected 'data_offsets'", NULL);
  write_raw(p, "{\"w\":{\"shape\":[2],\"data_offsets\":[0,8]}}", d, 8);
  expect_open_fail(p, MMRT_ERR_FORMAT, "tensor 'w': missing string field 'dtype'", NULL);
  write_raw(p,
            "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
            "\"v\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
            d, 16);
  expect_open_fail(p, MMRT_ERR_FORMAT, "overlaps tensor", NULL);
  write_raw(p,
            "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
            "\"v\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[12,16]}}",
            d, 16);
  expect_open_fail(p, MMRT_ERR_FORMAT, "data bytes [8, 12) belong to no tensor", "'v'");
  write_raw(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", d, 16);
  expect_open_fail(p, MMRT_ERR_FORMAT, "data area is 16 bytes but the tensors cover 8", NULL);
  write_raw(p,
            "{\"__metadata__\":{\"step\":3},"
            "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
            d, 8);
  expect_open_fail(p, MMRT_ERR_FORMAT, "__metadata__ key 'step' is not a string", NULL);
  expect_open_fail(tpath("none.safetensors"), MMRT_ERR_NOTFOUND, "cannot open", NULL);
}
END_TEST

START_TEST(read_checks_expectations) {
  float w[6] = {0}, got[6];
  int32_t ids[2] = {3, 4};
  MmrtTensorRef t[] = {{"w", MMRT_ST_F32, 2, {2, 3}, w}, {"ids", MMRT_ST_I32, 1, {2}, ids}};
  char err[512];
  const char *p = tpath("m.safetensors");
  ck_assert_int_eq(mmrt_st_save(p, t, 2, NULL, 0, err, sizeof err), MMRT_OK);
  MmrtStFile *f;
  ck_assert_int_eq(mmrt_st_open(&f, p, err, sizeof err), MMRT_OK);

  MmrtTensorRef q = {"w", MMRT_ST_F32, 2, {3, 2}, got};
  ck_assert_int_eq(mmrt_st_read(f, &q, err, sizeof err), MMRT_ERR_MISMATCH);
  ck_assert_msg(strstr(err, p) && strstr(err, "tensor 'w' is F32 [2, 3], expected F32 [3, 2]"),
                "%s", err);
  q = (MmrtTensorRef){"w", MMRT_ST_BF16, 2, {2, 3}, got};
  ck_assert_int_eq(mmrt_st_read(f, &q, err, sizeof err), MMRT_ERR_MISMATCH);
  ck_assert_msg(strstr(err, "expected BF16 [2, 3]"), "%s", err);
  q = (MmrtTensorRef){"w", MMRT_ST_F32, 1, {6}, got};
  ck_assert_int_eq(mmrt_st_read(f, &q, err, sizeof err), MMRT_ERR_MISMATCH);
  q = (MmrtTensorRef){"b", MMRT_ST_F32, 1, {6}, got};
  ck_assert_int_eq(mmrt_st_read(f, &q, err, sizeof err), MMRT_ERR_MISMATCH);
  ck_assert_msg(strstr(err, "tensor 'b' is missing"), "%s", err);
  /* strict: a tensor the model lacks */
  MmrtTensorRef only_w = {"w", MMRT_ST_F32, 2, {2, 3}, got};
  ck_assert_int_eq(mmrt_st_read_all(f, &only_w, 1, 0, err, sizeof err), MMRT_OK);
  ck_assert_int_eq(mmrt_st_read_all(f, &only_w, 1, 1, err, sizeof err), MMRT_ERR_MISMATCH);
  ck_assert_msg(strstr(err, "holds tensor 'ids' that the model does not have"), "%s", err);
  mmrt_st_close(f);

  /* bad arguments to save touch nothing */
  MmrtTensorRef dup[] = {{"w", MMRT_ST_F32, 1, {1}, w}, {"w", MMRT_ST_F32, 1, {1}, w}};
  ck_assert_int_eq(mmrt_st_save(tpath("d.safetensors"), dup, 2, NULL, 0, err, sizeof err),
                   MMRT_ERR_ARG);
  ck_assert_msg(strstr(err, "'w' appears twice"), "%s", err);
  MmrtTensorRef meta_name = {"__metadata__", MMRT_ST_F32, 1, {1}, w};
  ck_assert_int_eq(mmrt_st_save(tpath("d.safetensors"), &meta_name, 1, NULL, 0, err, sizeof err),
                   MMRT_ERR_ARG);
  MmrtTensorRef neg = {"n", MMRT_ST_F32, 1, {-1}, w};
  ck_assert_int_eq(mmrt_st_save(tpath("d.safetensors"), &neg, 1, NULL, 0, err, sizeof err),
                   MMRT_ERR_ARG);
  ck_assert_int_eq(access(tpath("d.safetensors"), F_OK), -1);
  assert_no_temp();
}
END_TEST

/* A write error part way (file size limit) leaves the old file intact and
 * no temporary behind. */
START_TEST(atomic_write_error) {
  char err[512];
  const char *p = tpath("c.safetensors");
  float small[4] = {1, 2, 3, 4};
  MmrtTensorRef t = {"w", MMRT_ST_F32, 1, {4}, small};
  ck_assert_int_eq(mmrt_st_save(p, &t, 1, NULL, 0, err, sizeof err), MMRT_OK);
  size_t l0;
  unsigned char *before = slurp(p, &l0);

  static float big[1 << 14];
  MmrtTensorRef tb = {"w", MMRT_ST_F32, 1, {1 << 14}, big};
  struct rlimit old, lim;
  getrlimit(RLIMIT_FSIZE, &old);
  lim = old;
  lim.rlim_cur = 4096;
  void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
  ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
  int rc = mmrt_st_save(p, &tb, 1, NULL, 0, err, sizeof err);
  setrlimit(RLIMIT_FSIZE, &old);
  signal(SIGXFSZ, prev);
  ck_assert_int_eq(rc, MMRT_ERR_IO);
  ck_assert_msg(strstr(err, p) && strstr(err, "writing") && strstr(err, "unchanged"), "%s", err);
  if (getenv("MMRT_SHOW_ERRORS")) fprintf(stderr, "%s\n", err);
  assert_no_temp();
  size_t l1;
  unsigned char *after = slurp(p, &l1);
  ck_assert(l0 == l1 && memcmp(before, after, l0) == 0);
  free(before);
  free(after);

  /* the final name is a directory, or a FIFO: refused before writing, never replaced */
  const char *dp = tpath("isdir.safetensors");
  ck_assert_int_eq(mkdir(dp, 0755), 0);
  ck_assert_int_eq(mmrt_st_save(dp, &t, 1, NULL, 0, err, sizeof err), MMRT_ERR_IO);
  ck_assert_msg(strstr(err, "is a directory, not a regular file"), "%s", err);
  assert_no_temp();
  struct stat st;
  ck_assert(stat(dp, &st) == 0 && S_ISDIR(st.st_mode));
  const char *fifo = tpath("fifo.safetensors");
  ck_assert_int_eq(mkfifo(fifo, 0644), 0);
  ck_assert_int_eq(mmrt_st_save(fifo, &t, 1, NULL, 0, err, sizeof err), MMRT_ERR_IO);
  ck_assert_msg(strstr(err, "is a FIFO, not a regular file; refusing to replace it"), "%s", err);
  ck_assert(stat(fifo, &st) == 0 && S_ISFIFO(st.st_mode));
  unlink(fifo);
  assert_no_temp();

  /* the directory does not exist */
  ck_assert_int_eq(mmrt_st_save(tpath("no/such/x.safetensors"), &t, 1, NULL, 0, err, sizeof err),
                   MMRT_ERR_NOTFOUND);
  ck_assert_msg(strstr(err, "no/such/x.safetensors"), "%s", err);

  /* plain atomic file helper */
  ck_assert_int_eq(mmrt_write_file_atomic(tpath("a.txt"), "hello\n", 6, err, sizeof err), MMRT_OK);
  ck_assert_int_eq(mmrt_write_file_atomic(tpath("a.txt"), "bye\n", 4, err, sizeof err), MMRT_OK);
  size_t la;
  unsigned char *a = slurp(tpath("a.txt"), &la);
  ck_assert(la == 4 && memcmp(a, "bye\n", 4) == 0);
  free(a);
  assert_no_temp();
}
END_TEST

static void save_ranks(const char *dir, const MmrtManifest *m, float base) {
  char err[512];
  for (int r = 0; r < m->world_size; r++) {
    float w[3] = {base + (float)r, 2, 3};
    MmrtTensorRef t = {"w", MMRT_ST_F32, 1, {3}, w};
    MmrtKV meta[] = {{MMRT_CKPT_DATA_ITER, "mmrt-iter v1 n=10 batch=2 shuffle=1 seed=1 "
                                           "epoch=0 pos=4"},
                     {MMRT_CKPT_OPT_STEP, "7"}};
    ck_assert_msg(mmrt_ckpt_save_rank(dir, r, m, &t, 1, meta, 2, err, sizeof err) == MMRT_OK, "%s",
                  err);
  }
}

START_TEST(checkpoint_dir) {
  char err[512], dir[400];
  snprintf(dir, sizeof dir, "%s/runs/a", tmpdir);
  MmrtManifest m = {2, 7, "vit-tiny tp=1 dp=2 sha=abc123"}, found;
  MmrtStFile *f;
  ck_assert_int_eq(mmrt_ckpt_open_rank(&f, dir, 0, &m, &found, err, sizeof err),
                   MMRT_ERR_NOTFOUND); /* fresh run */
  save_ranks(dir, &m, 10);
  ck_assert_int_eq(mmrt_ckpt_write_manifest(dir, &m, err, sizeof err), MMRT_OK);

  char mpath[512];
  snprintf(mpath, sizeof mpath, "%s/manifest.json", dir);
  size_t ml;
  char *mj = (char *)slurp(mpath, &ml);
  mj[ml] = 0;
  ck_assert_msg(strstr(mj, "\"rank-00001.safetensors\"") && strstr(mj, "\"step\": 7"), "%s", mj);
  free(mj);

  for (int r = 0; r < 2; r++) {
    ck_assert_msg(mmrt_ckpt_open_rank(&f, dir, r, &m, &found, err, sizeof err) == MMRT_OK, "%s",
                  err);
    ck_assert_int_eq(found.step, 7);
    float w[3];
    MmrtTensorRef t = {"w", MMRT_ST_F32, 1, {3}, w};
    ck_assert_int_eq(mmrt_st_read(f, &t, err, sizeof err), MMRT_OK);
    ck_assert(w[0] == 10.0f + (float)r);
    int64_t v;
    ck_assert_int_eq(mmrt_st_meta_int64(f, MMRT_CKPT_OPT_STEP, &v, err, sizeof err), 0);
    ck_assert_int_eq(v, 7);
    ck_assert_ptr_nonnull(strstr(mmrt_st_meta(f, MMRT_CKPT_DATA_ITER), "pos=4"));
    mmrt_st_close(f);
  }

  MmrtManifest other = m;
  snprintf(other.fingerprint, sizeof other.fingerprint, "vit-small");
  ck_assert_int_eq(mmrt_ckpt_open_rank(&f, dir, 0, &other, NULL, err, sizeof err),
                   MMRT_ERR_MISMATCH);
  ck_assert_msg(strstr(err, "manifest.json") && strstr(err, "'vit-tiny tp=1 dp=2 sha=abc123'") &&
                    strstr(err, "expected 'vit-small'"),
                "%s", err);
  other = m;
  other.world_size = 4;
  ck_assert_int_eq(mmrt_ckpt_open_rank(&f, dir, 0, &other, NULL, err, sizeof err),
                   MMRT_ERR_MISMATCH);
  ck_assert_msg(strstr(err, "world size is 2, expected 4"), "%s", err);

  /* a crash while overwriting: rank 1 already at step 8, manifest at 7 */
  MmrtManifest next = m;
  next.step = 8;
  float w[3] = {0};
  MmrtTensorRef t = {"w", MMRT_ST_F32, 1, {3}, w};
  ck_assert_int_eq(mmrt_ckpt_save_rank(dir, 1, &next, &t, 1, NULL, 0, err, sizeof err), 0);
  ck_assert_int_eq(mmrt_ckpt_open_rank(&f, dir, 1, &m, NULL, err, sizeof err), MMRT_ERR_MISMATCH);
  ck_assert_msg(strstr(err, "rank-00001.safetensors") && strstr(err, "step 8") &&
                    strstr(err, "expected step 7"),
                "%s", err);
  if (getenv("MMRT_SHOW_ERRORS")) fprintf(stderr, "%s\n", err);

  /* a rank file named by the manifest is gone */
  char rp[512];
  mmrt_ckpt_rank_path(rp, sizeof rp, dir, 1);
  ck_assert_int_eq(unlink(rp), 0);
  ck_assert_int_eq(mmrt_ckpt_open_rank(&f, dir, 1, &m, NULL, err, sizeof err), MMRT_ERR_FORMAT);
  ck_assert_msg(strstr(err, "rank-00001.safetensors"), "%s", err);

  /* reserved metadata keys are refused */
  MmrtKV bad = {MMRT_CKPT_STEP, "3"};
  ck_assert_int_eq(mmrt_ckpt_save_rank(dir, 0, &m, &t, 1, &bad, 1, err, sizeof err), MMRT_ERR_ARG);
  ck_assert_int_eq(mmrt_ckpt_save_rank(dir, 2, &m, &t, 1, NULL, 0, err, sizeof err), MMRT_ERR_ARG);

  /* a damaged manifest */
  spit(mpath, "{\"format\": \"mmrt-checkpoint\", \"version\": 1, \"step\": 7", 52);
  ck_assert_int_eq(mmrt_ckpt_read_manifest(dir, &found, err, sizeof err), MMRT_ERR_FORMAT);
  ck_assert_msg(strstr(err, "manifest.json: manifest is not a JSON object"), "%s", err);
  const char *mf =
      "{\"format\": \"mmrt-checkpoint\", \"version\": 1, \"step\": 7, "
      "\"world_size\": 2, \"fingerprint\": \"x\", \"files\": [\"rank-00000.safetensors\"]}";
  spit(mpath, mf, strlen(mf));
  ck_assert_int_eq(mmrt_ckpt_read_manifest(dir, &found, err, sizeof err), MMRT_ERR_FORMAT);
  ck_assert_msg(strstr(err, "field 'files': expected an array of 2"), "%s", err);
  if (getenv("MMRT_SHOW_ERRORS")) fprintf(stderr, "%s\n", err);
  DIR *d = opendir(dir);
  struct dirent *e;
  while ((e = readdir(d)))
    ck_assert_msg(!strstr(e->d_name, ".tmp."), "temporary %s left behind", e->d_name);
  closedir(d);
}
END_TEST

/* One directory per step behind the pointer: target alternation, commit,
 * prune to the last K, discard, damaged pointers, CRC of every tensor. */
static void commit_step(const char *root, int64_t step, int world, float base, char *stepdir) {
  char err[512];
  MmrtManifest m = {world, step, "fp"};
  ck_assert_msg(mmrt_ckpt_target(root, step, stepdir, 400, err, sizeof err) == MMRT_OK, "%s", err);
  save_ranks(stepdir, &m, base);
  ck_assert_msg(mmrt_ckpt_commit(root, stepdir, &m, err, sizeof err) == MMRT_OK, "%s", err);
}

static int exists(const char *root, const char *name) {
  char p[600];
  snprintf(p, sizeof p, "%s/%s", root, name);
  return access(p, F_OK) == 0;
}

/* A logical tensor g [5, 6] (g[i][j] = 10 i + j) cut into three pieces
 * (rank 0 rows 0..2 x cols 0..2, rank 1 rows 0..2 x cols 3..5, rank 2 rows
 * 3..4 whole), h [3, 3] replicated in every file, and a scalar s that only
 * rank 1's file holds (as a pipeline stage's file would): any box that
 * mmrt_ckpt_read_slice assembles equals the naive index, from whichever
 * rank's file it starts. */
static void save_pieces(const char *dir, int drop) {
  char err[512];
  MmrtManifest m = {3, 4, "pieces"};
  const int64_t box[3][4] = {{0, 0, 3, 3}, {0, 3, 3, 3}, {3, 0, 2, 6}}; /* first, len */
  for (int r = 0; r < 3; r++) {
    float g[18], h[9], sc = 42;
    const int64_t *b = box[r];
    for (int i = 0; i < b[2]; i++)
      for (int j = 0; j < b[3]; j++) g[i * b[3] + j] = (float)(10 * (b[0] + i) + b[1] + j);
    for (int k = 0; k < 9; k++) h[k] = (float)(k / 3 * 10 + k % 3);
    MmrtTensorRef t[3] = {{"g", MMRT_ST_F32, 2, {b[2], b[3]}, g},
                          {"h", MMRT_ST_F32, 2, {3, 3}, h},
                          {"s", MMRT_ST_F32, 0, {0}, &sc}};
    char v[3][128];
    MmrtSlice sg = {2, {5, 6}, {b[0], b[1]}, {b[2], b[3]}}, sh = {2, {3, 3}, {0, 0}, {3, 3}};
    mmrt_slice_format(v[0], sizeof v[0], &sg);
    mmrt_slice_format(v[1], sizeof v[1], &sh);
    MmrtKV meta[2] = {{"slice:g", v[0]}, {"slice:h", v[1]}};
    int n = r == 1 ? 3 : 2, skip = r == drop; /* rank `drop` has no g */
    ck_assert_msg(mmrt_ckpt_save_rank(dir, r, &m, t + skip, n - skip, meta + skip, 2 - skip, err,
                                      sizeof err) == MMRT_OK,
                  "%s", err);
  }
  ck_assert_int_eq(mmrt_ckpt_write_manifest(dir, &m, err, sizeof err), MMRT_OK);
}

START_TEST(read_slices) {
  char err[512], dir[400];
  snprintf(dir, sizeof dir, "%s/pieces", tmpdir);
  save_pieces(dir, -1);
  MmrtCkpt *c;
  MmrtManifest found;
  ck_assert_int_eq(mmrt_ckpt_open_all(&c, dir, "other", &found, err, sizeof err),
                   MMRT_ERR_MISMATCH);
  ck_assert_msg(strstr(err, "manifest.json: model fingerprint is 'pieces'"), "%s", err);
  ck_assert_msg(mmrt_ckpt_open_all(&c, dir, "pieces", &found, err, sizeof err) == MMRT_OK, "%s",
                err);
  ck_assert_int_eq(mmrt_ckpt_nfiles(c), 3);
  const int64_t boxes[][4] = {{0, 0, 5, 6}, {1, 2, 3, 3}, {4, 5, 1, 1}, {2, 1, 2, 4}};
  for (int q = 0; q < 4; q++) {
    const int64_t *b = boxes[q];
    for (int first = 0; first < 3; first++) {
      float w[30];
      MmrtSlice want = {2, {5, 6}, {b[0], b[1]}, {b[2], b[3]}};
      MmrtTensorRef t = {"g", MMRT_ST_F32, 2, {b[2], b[3]}, w};
      ck_assert_msg(mmrt_ckpt_read_slice(c, &t, &want, first, err, sizeof err) == MMRT_OK, "%s",
                    err);
      for (int i = 0; i < b[2]; i++)
        for (int j = 0; j < b[3]; j++)
          ck_assert_msg(w[i * b[3] + j] == (float)(10 * (b[0] + i) + b[1] + j),
                        "box %d from rank %d: [%d][%d] = %g", q, first, i, j,
                        (double)w[i * b[3] + j]);
    }
  }
  float sc = 0, h[4];
  MmrtSlice s0 = {0, {0}, {0}, {0}}, sh = {2, {3, 3}, {1, 1}, {2, 2}};
  MmrtTensorRef ts = {"s", MMRT_ST_F32, 0, {0}, &sc}, th = {"h", MMRT_ST_F32, 2, {2, 2}, h};
  ck_assert_int_eq(mmrt_ckpt_read_slice(c, &ts, &s0, 0, err, sizeof err), MMRT_OK);
  ck_assert(sc == 42.0f); /* found in rank 1's file alone */
  ck_assert_int_eq(mmrt_ckpt_read_slice(c, &th, &sh, 2, err, sizeof err), MMRT_OK);
  ck_assert(h[0] == 11.0f && h[1] == 12.0f && h[2] == 21.0f && h[3] == 22.0f);
  /* another global shape, an absent tensor */
  MmrtSlice wrong = {2, {6, 6}, {0, 0}, {2, 2}};
  ck_assert_int_eq(mmrt_ckpt_read_slice(c, &th, &wrong, 0, err, sizeof err), MMRT_ERR_MISMATCH);
  th.name = "g";
  ck_assert_int_eq(mmrt_ckpt_read_slice(c, &th, &wrong, 0, err, sizeof err), MMRT_ERR_MISMATCH);
  ck_assert_msg(strstr(err, "rank-00000.safetensors: tensor 'g' is a piece of F32 [5, 6], "
                            "expected F32 [6, 6]"),
                "%s", err);
  th.name = "nope";
  ck_assert_int_eq(mmrt_ckpt_read_slice(c, &th, &sh, 0, err, sizeof err), MMRT_ERR_NOTFOUND);
  mmrt_ckpt_close(c);
  /* rank 1's piece of g is gone: the elements it held are in no file */
  save_pieces(dir, 1);
  ck_assert_int_eq(mmrt_ckpt_open_all(&c, dir, NULL, NULL, err, sizeof err), MMRT_OK);
  float w[30];
  MmrtSlice all = {2, {5, 6}, {0, 0}, {5, 6}};
  MmrtTensorRef t = {"g", MMRT_ST_F32, 2, {5, 6}, w};
  ck_assert_int_eq(mmrt_ckpt_read_slice(c, &t, &all, 0, err, sizeof err), MMRT_ERR_MISMATCH);
  ck_assert_msg(strstr(err, "tensor 'g': 9 of the 30 elements this rank needs are in no rank file"),
                "%s", err);
  mmrt_ckpt_close(c);
}
END_TEST

START_TEST(checkpoint_steps) {
  char err[512], root[400], sd[400], live[400];
  snprintf(root, sizeof root, "%s/run", tmpdir);
  MmrtManifest want = {2, 0, "fp"}, found;
  MmrtStFile *f;
  ck_assert_int_eq(mmrt_ckpt_resolve(root, live, sizeof live, err, sizeof err), MMRT_ERR_NOTFOUND);
  ck_assert_int_eq(mmrt_ckpt_target(root, 5, sd, sizeof sd, err, sizeof err), MMRT_OK);
  ck_assert_msg(strstr(sd, "/run/step-000005") && !strstr(sd, ".1"), "%s", sd);
  for (int64_t s = 5; s <= 20; s += 5) commit_step(root, s, 2, (float)s, sd);
  /* the pointer names the newest; with the default keep, two remain */
  ck_assert_int_eq(mmrt_ckpt_resolve(root, live, sizeof live, err, sizeof err), MMRT_OK);
  ck_assert_msg(strstr(live, "/run/step-000020"), "%s", live);
  ck_assert(exists(root, "step-000005") && exists(root, "step-000015"));
  char stale[600];
  snprintf(stale, sizeof stale, "%s/latest.tmp.99999", root); /* a killed writer's */
  spit(stale, "step-000099\n", 12);
  ck_assert_int_eq(mmrt_ckpt_prune(root, 3, err, sizeof err), MMRT_OK);
  ck_assert(!exists(root, "latest.tmp.99999"));
  ck_assert(!exists(root, "step-000005") && exists(root, "step-000010"));
  ck_assert(exists(root, "step-000015") && exists(root, "step-000020"));
  ck_assert_int_eq(mmrt_ckpt_prune(root, MMRT_CKPT_KEEP_DEFAULT, err, sizeof err), MMRT_OK);
  ck_assert(!exists(root, "step-000005") && !exists(root, "step-000010"));
  ck_assert(exists(root, "step-000015") && exists(root, "step-000020"));
  ck_assert_int_eq(mmrt_ckpt_open_rank(&f, root, 1, &want, &found, err, sizeof err), MMRT_OK);
  ck_assert_int_eq(found.step, 20);
  float w[3];
  MmrtTensorRef t = {"w", MMRT_ST_F32, 1, {3}, w};
  ck_assert_int_eq(mmrt_st_read(f, &t, err, sizeof err), MMRT_OK);
  ck_assert(w[0] == 21.0f);
  mmrt_st_close(f);

  /* the same step again never writes into the live directory */
  ck_assert_int_eq(mmrt_ckpt_target(root, 20, sd, sizeof sd, err, sizeof err), MMRT_OK);
  ck_assert_msg(strstr(sd, "/run/step-000020.1"), "%s", sd);
  commit_step(root, 20, 2, 100, sd);
  ck_assert_int_eq(mmrt_ckpt_target(root, 20, sd, sizeof sd, err, sizeof err), MMRT_OK);
  ck_assert_msg(strstr(sd, "/run/step-000020") && !strstr(sd, ".1"), "%s", sd);
  ck_assert_int_eq(mmrt_ckpt_prune(root, 1, err, sizeof err), MMRT_OK);
  ck_assert(!exists(root, "step-000015") && !exists(root, "step-000020"));
  ck_assert(exists(root, "step-000020.1"));

  /* a write that failed half way: rank 0's file of step 25, no commit */
  MmrtManifest m25 = {2, 25, "fp"};
  ck_assert_int_eq(mmrt_ckpt_target(root, 25, sd, sizeof sd, err, sizeof err), MMRT_OK);
  float z[3] = {0};
  MmrtTensorRef tz = {"w", MMRT_ST_F32, 1, {3}, z};
  ck_assert_int_eq(mmrt_ckpt_save_rank(sd, 0, &m25, &tz, 1, NULL, 0, err, sizeof err), MMRT_OK);
  ck_assert_int_eq(mmrt_ckpt_open_rank(&f, root, 0, &want, &found, err, sizeof err), MMRT_OK);
  ck_assert_int_eq(found.step, 20); /* still the previous one */
  mmrt_st_close(f);
  ck_assert_int_eq(mmrt_ckpt_discard(root, sd, err, sizeof err), MMRT_OK);
  ck_assert(!exists(root, "step-000025"));
  ck_assert_int_eq(mmrt_ckpt_resolve(root, live, sizeof live, err, sizeof err), MMRT_OK);
  ck_assert_int_eq(mmrt_ckpt_discard(root, live, err, sizeof err), MMRT_OK); /* live: kept */
  ck_assert(exists(root, "step-000020.1"));

  /* a flipped byte in a tensor is an error naming the file and tensor */
  char rp[600];
  mmrt_ckpt_rank_path(rp, sizeof rp, live, 1);
  size_t len;
  unsigned char *b = slurp(rp, &len);
  b[len - 5] ^= 0x10;
  spit(rp, b, len);
  free(b);
  ck_assert_int_eq(mmrt_ckpt_open_rank(&f, root, 1, &want, &found, err, sizeof err), MMRT_OK);
  ck_assert_int_eq(mmrt_st_read(f, &t, err, sizeof err), MMRT_ERR_FORMAT);
  ck_assert_msg(strstr(err, rp) && strstr(err, "tensor 'w'") && strstr(err, "CRC32"), "%s", err);
  if (getenv("MMRT_SHOW_ERRORS")) fprintf(stderr, "%s\n", err);
  mmrt_st_close(f);

  /* a file without CRCs is not a checkpoint file */
  MmrtKV meta[] = {{MMRT_CKPT_STEP, "20"},
                   {MMRT_CKPT_RANK, "1"},
                   {MMRT_CKPT_WORLD, "2"},
                   {MMRT_CKPT_FINGERPRINT, "fp"}};
  ck_assert_int_eq(mmrt_st_save(rp, &t, 1, meta, 4, err, sizeof err), MMRT_OK);
  ck_assert_int_eq(mmrt_ckpt_open_rank(&f, root, 1, &want, &found, err, sizeof err),
                   MMRT_ERR_FORMAT);
  ck_assert_msg(strstr(err, rp) && strstr(err, "no CRC32"), "%s", err);
  MmrtKV crc = {"crc32:w", "0"};
  ck_assert_int_eq(mmrt_st_save_crc(rp, &t, 1, &crc, 1, err, sizeof err), MMRT_ERR_ARG);
  /* a CRC key of a tensor the file lacks, a CRC that is not hex */
  MmrtKV stray[] = {{"crc32:v", "00000000"}};
  ck_assert_int_eq(mmrt_st_save(rp, &t, 1, stray, 1, err, sizeof err), MMRT_OK);
  expect_open_fail(rp, MMRT_ERR_FORMAT, "'crc32:v'", "does not have");
  MmrtKV nothex[] = {{"crc32:w", "0000000g"}};
  ck_assert_int_eq(mmrt_st_save(rp, &t, 1, nothex, 1, err, sizeof err), MMRT_OK);
  expect_open_fail(rp, MMRT_ERR_FORMAT, "'crc32:w'", "8 lowercase hex digits");

  /* damaged pointers */
  char pp[600];
  snprintf(pp, sizeof pp, "%s/latest", root);
  spit(pp, "../etc\n", 7);
  ck_assert_int_eq(mmrt_ckpt_open_rank(&f, root, 0, &want, &found, err, sizeof err),
                   MMRT_ERR_FORMAT);
  ck_assert_msg(strstr(err, pp) && strstr(err, "step-NNNNNN"), "%s", err);
  spit(pp, "step-000099\n", 12);
  ck_assert_int_eq(mmrt_ckpt_open_rank(&f, root, 0, &want, &found, err, sizeof err),
                   MMRT_ERR_FORMAT);
  ck_assert_msg(strstr(err, "step-000099, which is not a directory"), "%s", err);
  ck_assert_int_eq(mmrt_ckpt_prune(root, 0, err, sizeof err), MMRT_ERR_ARG);
  ck_assert_int_eq(mmrt_ckpt_commit(root, "/elsewhere/step-000001", &want, err, sizeof err),
                   MMRT_ERR_ARG);
}
END_TEST

/* A complete checkpoint of a later step than the live one (another run's,
 * the pointer set back to resume from an earlier one) survives pruning
 * until the live step passes it; an incomplete one goes. */
START_TEST(prune_keeps_newer) {
  char err[512], root[400], sd[400];
  snprintf(root, sizeof root, "%s/newer", tmpdir);
  for (int64_t s = 5; s <= 10; s += 5) commit_step(root, s, 1, (float)s, sd);
  ck_assert_int_eq(
      mmrt_write_file_atomic(tpath("newer/latest"), "step-000005\n", 12, err, sizeof err), MMRT_OK);
  ck_assert_int_eq(mkdir(tpath("newer/step-000012"), 0755), 0); /* a failed write's */
  commit_step(root, 6, 1, 6, sd);
  ck_assert_int_eq(mmrt_ckpt_prune(root, 1, err, sizeof err), MMRT_OK);
  ck_assert(exists(root, "step-000006") && exists(root, "step-000010"));
  ck_assert(!exists(root, "step-000005") && !exists(root, "step-000012"));
  commit_step(root, 11, 1, 11, sd);
  ck_assert_int_eq(mmrt_ckpt_prune(root, 1, err, sizeof err), MMRT_OK);
  ck_assert(exists(root, "step-000011") && !exists(root, "step-000010"));
}
END_TEST

/* mmrt_probe_output: each kind of wrong path refused by flag and path;
 * DIR created; a FIFO is fine for a stream and not for a file. */
START_TEST(probe_outputs) {
  char err[512];
  char inb[512];
  snprintf(inb, sizeof inb, "%s", tpath("in.bin")); /* tpath's buffers rotate */
  const char *in[] = {NULL, inb};
  FILE *f = fopen(in[1], "w");
  fclose(f);
  ck_assert_int_eq(mmrt_probe_output("--o", tpath("a/b/c"), MMRT_OUT_DIR, in, 2, err, sizeof err),
                   MMRT_OK);
  struct stat st;
  ck_assert(stat(tpath("a/b/c"), &st) == 0 && S_ISDIR(st.st_mode));
  ck_assert_int_eq(mmrt_probe_output("--o", tpath("x.st"), MMRT_OUT_FILE, in, 2, err, sizeof err),
                   MMRT_OK);
  ck_assert(access(tpath("x.st"), F_OK) != 0); /* probed, not created */
  ck_assert_int_ne(
      mmrt_probe_output("--o", tpath("no/x.st"), MMRT_OUT_FILE, in, 2, err, sizeof err), MMRT_OK);
  ck_assert_msg(strstr(err, "--o ") && strstr(err, "/no does not exist"), "%s", err);
  ck_assert_int_ne(mmrt_probe_output("--o", tpath("a"), MMRT_OUT_FILE, in, 2, err, sizeof err),
                   MMRT_OK);
  ck_assert_msg(strstr(err, "is a directory, expected a file"), "%s", err);
  ck_assert_int_ne(mmrt_probe_output("--o", in[1], MMRT_OUT_DIR, NULL, 0, err, sizeof err),
                   MMRT_OK);
  ck_assert_msg(strstr(err, "is a regular file, expected a directory"), "%s", err);
  ck_assert_int_ne(mmrt_probe_output("--o", in[1], MMRT_OUT_FILE, in, 2, err, sizeof err), MMRT_OK);
  ck_assert_msg(strstr(err, "is the input"), "%s", err);
  ck_assert_int_eq(mkfifo(tpath("fifo"), 0644), 0);
  ck_assert_int_ne(mmrt_probe_output("--o", tpath("fifo"), MMRT_OUT_FILE, in, 2, err, sizeof err),
                   MMRT_OK);
  ck_assert_msg(strstr(err, "is a FIFO, not a regular file"), "%s", err);
  ck_assert_int_eq(mmrt_probe_output("--o", tpath("fifo"), MMRT_OUT_STREAM, in, 2, err, sizeof err),
                   MMRT_OK);
  ck_assert_int_ne(mmrt_probe_output("--o", "", MMRT_OUT_FILE, in, 2, err, sizeof err), MMRT_OK);
}
END_TEST

/* DIR/lock: a second taker refused naming the holder; a dead holder's lock
 * taken over; unlock removes only our own. */
START_TEST(lock_dir) {
  char err[512], line[300], host[256] = "";
  long stale = -1;
  const char *root = tpath("");
  ck_assert_int_eq(mmrt_ckpt_lock(root, &stale, err, sizeof err), MMRT_OK);
  ck_assert_int_eq(stale, 0);
  ck_assert_int_ne(mmrt_ckpt_lock(root, &stale, err, sizeof err), MMRT_OK);
  snprintf(line, sizeof line, "held by process %ld", (long)getpid());
  ck_assert_msg(strstr(err, line), "%s", err);
  pid_t child = fork();
  if (child == 0) _exit(0);
  waitpid(child, NULL, 0); /* a pid that is not running */
  gethostname(host, sizeof host - 1);
  FILE *f = fopen(tpath("lock"), "w");
  fprintf(f, "%s %ld\n", host, (long)child);
  fclose(f);
  ck_assert_int_eq(mmrt_ckpt_lock(root, &stale, err, sizeof err), MMRT_OK);
  ck_assert_int_eq(stale, (long)child);
  mmrt_ckpt_unlock(root);
  ck_assert(access(tpath("lock"), F_OK) != 0);
  f = fopen(tpath("lock"), "w");
  fprintf(f, "other.host 1\n");
  fclose(f);
  mmrt_ckpt_unlock(root); /* not ours: kept */
  ck_assert_int_ne(mmrt_ckpt_lock(root, &stale, err, sizeof err), MMRT_OK);
  ck_assert_msg(strstr(err, "held by process 1 on host other.host"), "%s", err);
}
END_TEST

int main(void) {
  Suite *s = suite_create("rt_ckpt");
  TCase *tc = tcase_create("safetensors");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, round_trip_dtypes);
  tcase_add_test(tc, reference_bytes);
  tcase_add_test(tc, corrupt_files);
  tcase_add_test(tc, read_checks_expectations);
  tcase_add_test(tc, atomic_write_error);
  tcase_add_test(tc, checkpoint_dir);
  tcase_add_test(tc, checkpoint_steps);
  tcase_add_test(tc, read_slices);
  tcase_add_test(tc, prune_keeps_newer);
  tcase_add_test(tc, probe_outputs);
  tcase_add_test(tc, lock_dir);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_ENV);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
