/* check_rt_hf.c: the Hugging Face reader's conversions and slices
 * (runtime/io/mmrt_hf.c): every fp16 and bf16 bit pattern against the
 * compiler's own conversion, and mmrt_hf_read's transposed, fused and
 * sliced reads (and the parts it reads alone) against index arithmetic on a
 * file written here. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mmrt_hf.h"

START_TEST(test_f16_every_value) {
  for (uint32_t b = 0; b < 65536; b++) {
    _Float16 h;
    uint16_t u = (uint16_t)b;
    memcpy(&h, &u, 2);
    float want = (float)h, got = mmrt_hf_f16(u);
    if (isnan(want)) {
      ck_assert_msg(isnan(got), "fp16 %04x: NaN expected, got %g", b, got);
    } else {
      uint32_t x, y;
      memcpy(&x, &want, 4);
      memcpy(&y, &got, 4);
      ck_assert_msg(x == y, "fp16 %04x: %a expected, got %a", b, want, got);
    }
  }
}
END_TEST

START_TEST(test_bf16_every_value) {
  for (uint32_t b = 0; b < 65536; b++) {
    uint32_t x = b << 16, y;
    float got = mmrt_hf_bf16((uint16_t)b);
    memcpy(&y, &got, 4);
    ck_assert_uint_eq(x, y);
  }
}
END_TEST

/* A GPT-2 of width 4, one layer: c_attn [4, 12] fused and transposed, read
 * as q/k/v pieces, whole and as slices of rows and columns. */
START_TEST(test_read_fused_transposed_slices) {
  char dir[] = "/tmp/check_rt_hf.XXXXXX", path[512], err[1024];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/config.json", dir);
  FILE *f = fopen(path, "w");
  fputs("{\"architectures\": [\"GPT2LMHeadModel\"], \"vocab_size\": 8, \"n_positions\": 4, "
        "\"n_embd\": 4, \"n_layer\": 1, \"n_head\": 2}",
        f);
  fclose(f);
  static const char *names[] = {"transformer.wte.weight",
                                "transformer.wpe.weight",
                                "transformer.h.0.ln_1.weight",
                                "transformer.h.0.ln_1.bias",
                                "transformer.h.0.attn.c_attn.weight",
                                "transformer.h.0.attn.c_attn.bias",
                                "transformer.h.0.attn.c_proj.weight",
                                "transformer.h.0.attn.c_proj.bias",
                                "transformer.h.0.ln_2.weight",
                                "transformer.h.0.ln_2.bias",
                                "transformer.h.0.mlp.c_fc.weight",
                                "transformer.h.0.mlp.c_fc.bias",
                                "transformer.h.0.mlp.c_proj.weight",
                                "transformer.h.0.mlp.c_proj.bias",
                                "transformer.ln_f.weight",
                                "transformer.ln_f.bias"};
  static const int64_t shapes[][2] = {{8, 4},  {4, 4}, {4, 0}, {4, 0}, {4, 12}, {12, 0},
                                      {4, 4},  {4, 0}, {4, 0}, {4, 0}, {4, 16}, {16, 0},
                                      {16, 4}, {4, 0}, {4, 0}, {4, 0}};
  MmrtTensorRef t[16];
  float data[16][64];
  for (int i = 0; i < 16; i++) {
    t[i] = (MmrtTensorRef){
        .name = names[i], .dtype = MMRT_ST_F32, .ndim = shapes[i][1] ? 2 : 1, .data = data[i]};
    t[i].shape[0] = shapes[i][0];
    t[i].shape[1] = shapes[i][1];
    for (int k = 0; k < 64; k++) data[i][k] = (float)(100 * i + k);
  }
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  ck_assert_int_eq(mmrt_st_save(path, t, 16, NULL, 0, err, sizeof err), MMRT_OK);
  MmrtHf *h;
  ck_assert_msg(mmrt_hf_open(&h, dir, err, sizeof err) == MMRT_OK, "%s", err);
  static const char *pnames[] = {"gpt.h.0.attn.q_proj.weight", "gpt.h.0.attn.k_proj.weight",
                                 "gpt.h.0.attn.v_proj.weight"};
  MmrtHfParam p[3];
  MmrtHfSrc src[3];
  for (int j = 0; j < 3; j++) p[j] = (MmrtHfParam){.name = pnames[j], .ndim = 2, .shape = {4, 4}};
  /* the rest of the model's parameters are outside the prefix "gpt.h.0.attn" */
  ck_assert_int_eq(mmrt_hf_match(h, "gpt", p, 3, src, err, sizeof err), MMRT_ERR_MISMATCH);
  ck_assert_msg(strstr(err, "transformer.wte.weight") && strstr(err, "gpt.wte.weight"), "%s", err);
  /* match the three pieces against a mapping of their own: read them directly */
  for (int j = 0; j < 3; j++) {
    src[j] = (MmrtHfSrc){.tensor = -1, .row0 = 4 * j, .transpose = 1};
    for (int i = 0; i < mmrt_hf_ntensors(h); i++)
      if (strcmp(mmrt_hf_tensor(h, i, NULL, NULL, NULL), names[4]) == 0) src[j].tensor = i;
    ck_assert_int_ge(src[j].tensor, 0);
    /* rows 1..2 and columns 2..3 of part j of c_attn^T: c_attn[col][4j + row] */
    MmrtSlice want = {.ndim = 2, .global = {4, 4}, .first = {1, 2}, .len = {2, 2}};
    float got[4];
    ck_assert_int_eq(mmrt_hf_read(h, &p[j], &src[j], &want, got, err, sizeof err), MMRT_OK);
    for (int r = 0; r < 2; r++)
      for (int c = 0; c < 2; c++)
        ck_assert_float_eq(got[r * 2 + c], data[4][(2 + c) * 12 + 4 * j + 1 + r]);
  }
  /* parts stored in the parameter's layout (tp, ZeRO: only their elements read): rows 3..7
   * of wte as a parameter [4, 4] at row0 = 3 (a fused tensor's part), cut by rows (one
   * stretch), by columns (one a row) and both; first with c_attn in the cache, then with wte
   * itself there (read whole by a whole parameter: the cached path) */
  int wte = -1;
  for (int i = 0; i < mmrt_hf_ntensors(h); i++)
    if (strcmp(mmrt_hf_tensor(h, i, NULL, NULL, NULL), names[0]) == 0) wte = i;
  ck_assert_int_ge(wte, 0);
  MmrtHfParam q = {.name = "part", .ndim = 2, .shape = {4, 4}};
  MmrtHfSrc qs = {.tensor = wte, .row0 = 3, .transpose = 0};
  static const MmrtSlice cuts[] = {{2, {4, 4}, {2, 0}, {2, 4}},
                                   {2, {4, 4}, {0, 1}, {4, 2}},
                                   {2, {4, 4}, {1, 3}, {3, 1}},
                                   {2, {4, 4}, {0, 0}, {4, 4}}};
  for (int pass = 0; pass < 2; pass++)
    for (int c = 0; c < 4; c++) {
      const MmrtSlice *w = &cuts[c];
      float got[16];
      ck_assert_int_eq(mmrt_hf_read(h, &q, &qs, w, got, err, sizeof err), MMRT_OK);
      for (int r = 0; r < w->len[0]; r++)
        for (int k = 0; k < w->len[1]; k++)
          ck_assert_float_eq(got[r * w->len[1] + k],
                             data[0][(3 + w->first[0] + r) * 4 + w->first[1] + k]);
    }
  mmrt_hf_close(h);
  remove(path);
  snprintf(path, sizeof path, "%s/config.json", dir);
  remove(path);
  rmdir(dir);
}
END_TEST

int main(void) {
  Suite *s = suite_create("rt_hf");
  TCase *tc = tcase_create("hf");
  tcase_add_test(tc, test_f16_every_value);
  tcase_add_test(tc, test_bf16_every_value);
  tcase_add_test(tc, test_read_fused_transposed_slices);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_ENV);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
