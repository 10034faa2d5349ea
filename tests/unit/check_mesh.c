/* check_mesh.c: support/mesh_axes.h against the numbering written out by
 * hand: rank = ((pp_c * dp + dp_c) * cp + cp_c) * tp + tp_c over the whole
 * mesh (Megatron's: tp groups are adjacent ranks) and (dp_c * cp + cp_c) *
 * tp + tp_c over the IR's axes; coordinates <-> rank both ways on every rank
 * of a set of meshes; the product; the names and the IR's axes. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"
#include "support/mesh_axes.h"

static const int meshes[][4] = {{1, 1, 1, 1}, {2, 1, 1, 1}, {1, 1, 2, 1}, {2, 3, 2, 1},
                                {3, 2, 4, 2}, {1, 2, 1, 3}, {2, 2, 2, 2}};

/* size[] of the table's axes from dp, cp, tp, pp (the rest 1) */
static void sizes_of(const int *d, int *size) {
  for (int a = 0; a < MESH_NAXES; a++) size[a] = 1;
  size[MESH_DP] = d[0], size[MESH_CP] = d[1], size[MESH_TP] = d[2], size[MESH_PP] = d[3];
}

START_TEST(test_numbering) {
  for (size_t k = 0; k < sizeof meshes / sizeof *meshes; k++) {
    const int *d = meshes[k];
    int size[MESH_NAXES], co[MESH_NAXES];
    sizes_of(d, size);
    int world = d[0] * d[1] * d[2] * d[3];
    ck_assert_int_eq(mesh_product(size, MESH_NAXES), world);
    ck_assert_int_eq(mesh_product(size, MESH_NIR), d[0] * d[1] * d[2]);
    int r = 0;
    for (int p = 0; p < d[3]; p++)
      for (int x = 0; x < d[0]; x++)
        for (int c = 0; c < d[1]; c++)
          for (int t = 0; t < d[2]; t++, r++) {
            ck_assert_int_eq(r, ((p * d[0] + x) * d[1] + c) * d[2] + t);
            mesh_coords(size, r, co, MESH_NAXES);
            ck_assert_int_eq(co[MESH_PP], p);
            ck_assert_int_eq(co[MESH_DP], x);
            ck_assert_int_eq(co[MESH_CP], c);
            ck_assert_int_eq(co[MESH_TP], t);
            ck_assert_int_eq(mesh_rank_of(size, co, MESH_NAXES), r);
            /* the IR's axes alone: the rank within a pipeline stage */
            int q = r % (d[0] * d[1] * d[2]), ci[MESH_NAXES];
            mesh_coords(size, q, ci, MESH_NIR);
            ck_assert_int_eq(ci[MESH_DP], x);
            ck_assert_int_eq(ci[MESH_CP], c);
            ck_assert_int_eq(ci[MESH_TP], t);
            ck_assert_int_eq(mesh_rank_of(size, ci, MESH_NIR), (x * d[1] + c) * d[2] + t);
          }
    ck_assert_int_eq(r, world);
  }
}
END_TEST

START_TEST(test_names) {
  ck_assert_str_eq(mesh_axis_name(MESH_DP), "dp");
  ck_assert_str_eq(mesh_axis_name(MESH_CP), "cp");
  ck_assert_str_eq(mesh_axis_name(MESH_TP), "tp");
  ck_assert_str_eq(mesh_axis_name(MESH_PP), "pp");
  ck_assert_str_eq(mesh_axis_name(MESH_NAXES), "?");
  ck_assert_str_eq(mesh_axis_name(-1), "?");
  /* the IR's axes: dp, cp, tp, with the table's numbers; pp is the runtime's */
  ck_assert_int_eq(IR_NAXES, 3);
  ck_assert_int_eq(IR_AX_DP, MESH_DP);
  ck_assert_int_eq(IR_AX_CP, MESH_CP);
  ck_assert_int_eq(IR_AX_TP, MESH_TP);
  ck_assert_str_eq(ir_axis_name(IR_AX_TP), "tp");
  ck_assert_str_eq(ir_axis_name((IrAxis)MESH_PP), "?");
}
END_TEST

START_TEST(test_plan_ranks) {
  MmPlan pl;
  MmTrain tr;
  mm_settings_default(&pl, &tr);
  ck_assert_int_eq(mm_plan_ranks(&pl), 1);
  pl.dp = 3, pl.cp = 2, pl.tp = 4, pl.pp = 5;
  ck_assert_int_eq(mm_plan_ranks(&pl), 120);
  int size[MESH_NAXES];
  mm_plan_mesh(&pl, size);
  ck_assert_int_eq(size[MESH_DP], 3);
  ck_assert_int_eq(size[MESH_CP], 2);
  ck_assert_int_eq(size[MESH_TP], 4);
  ck_assert_int_eq(size[MESH_PP], 5);
}
END_TEST

int main(void) {
  Suite *s = suite_create("mesh");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, test_numbering);
  tcase_add_test(tc, test_names);
  tcase_add_test(tc, test_plan_ranks);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int nf = srunner_ntests_failed(sr);
  srunner_free(sr);
  return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
