/* check_pp_sched.c: pipeline schedules against the published formulas.
 * The simulator runs each generated schedule (with and without explicit
 * transfers) and its bubble must equal (p−1)/m for GPipe and 1F1B and
 * (p−1)/(v·m) for interleaved 1F1B (Narayanan et al. 2021) with equal-cost
 * stages, ZB-H1's idle time (p−1)(T_F + T_B − T_W) (Qi et al. 2024); 1F1B's
 * stage r never holds more than p − r micro-batches; broken schedules are
 * found (deadlock, a lost dependency, messages out of order). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes/pp_sched.h"

typedef struct {
  double f[64], i[64], w[64];
  PpCosts c;
} Costs;

static void costs(Costs *k, int stages, double f, double i, double w) {
  for (int s = 0; s < stages; s++) {
    k->f[s] = f;
    k->i[s] = i;
    k->w[s] = w;
  }
  k->c = (PpCosts){k->f, k->i, k->w, 0};
}

/* the trainer's micro-batch slots per rank, walked from the list
 * (pp_sched_slots): GPipe holds all m, 1F1B's rank r p - r */
static int slots[64];

static double bubble_of(PpSchedKind kind, int p, int v, int m, bool comms, const Costs *k,
                        PpSim *sim) {
  PpSchedule s;
  char err[256];
  ck_assert_msg(pp_sched_build(&s, kind, p, v, m, err, sizeof err), "%s", err);
  if (comms) pp_sched_add_comms(&s);
  for (int r = 0; r < p && r < 64; r++) slots[r] = pp_sched_slots(&s, r);
  ck_assert_msg(pp_sched_simulate(&s, &k->c, sim), "%s p=%d v=%d m=%d: %s", pp_sched_name(kind), p,
                v, m, sim->msg);
  double b = sim->bubble;
  pp_sched_free(&s);
  return b;
}

START_TEST(gpipe_and_1f1b_bubble) {
  const int ps[] = {1, 2, 3, 4, 8}, ms[] = {8, 9, 13, 16, 32};
  for (int a = 0; a < 5; a++)
    for (int b = 0; b < 5; b++)
      for (int comms = 0; comms < 2; comms++)
        for (int kind = PP_1F1B; kind <= PP_GPIPE; kind++) {
          int p = ps[a], m = ms[b];
          Costs k;
          costs(&k, p, 1.0, 2.0, 0.0); /* backward twice the forward */
          PpSim sim;
          double got = bubble_of(kind, p, 1, m, comms, &k, &sim);
          ck_assert_msg(fabs(got - (double)(p - 1) / m) < 1e-9, "%s p=%d m=%d: bubble %.12f",
                        pp_sched_name(kind), p, m, got);
          for (int r = 0; r < p; r++) {
            int want = kind == PP_GPIPE ? m : p - r;
            ck_assert_msg(sim.max_inflight[r] == want, "%s p=%d m=%d rank %d: %d in flight",
                          pp_sched_name(kind), p, m, r, sim.max_inflight[r]);
            ck_assert_msg(slots[r] == want, "%s p=%d m=%d rank %d: %d slots, want %d",
                          pp_sched_name(kind), p, m, r, slots[r], want);
          }
          pp_sim_free(&sim, p);
        }
}
END_TEST

START_TEST(interleaved_bubble) {
  const int ps[] = {2, 3, 4}, vs[] = {2, 3, 4}, mfac[] = {1, 2, 3, 4};
  for (int a = 0; a < 3; a++)
    for (int b = 0; b < 3; b++)
      for (int c = 0; c < 4; c++)
        for (int comms = 0; comms < 2; comms++) {
          int p = ps[a], v = vs[b], m = p * mfac[c];
          Costs k;
          costs(&k, p * v, 1.0 / v, 2.0 / v, 0.0); /* each chunk 1/v of a stage */
          PpSim sim;
          double got = bubble_of(PP_INTERLEAVED, p, v, m, comms, &k, &sim);
          ck_assert_msg(fabs(got - (double)(p - 1) / (v * m)) < 1e-9,
                        "interleaved p=%d v=%d m=%d: bubble %.12f, want %.12f", p, v, m, got,
                        (double)(p - 1) / (v * m));
          pp_sim_free(&sim, p);
        }
}
END_TEST

START_TEST(zbh1_bubble) {
  const double cf[][3] = {{1, 1, 1}, {1, 1.25, 0.75}, {1, 1, 0.5}, {2, 2.5, 1.5}};
  const int ps[] = {2, 3, 4, 6}, ms[] = {1, 2, 3};
  for (int a = 0; a < 4; a++)
    for (int b = 0; b < 3; b++)
      for (int c = 0; c < 4; c++)
        for (int comms = 0; comms < 2; comms++) {
          int p = ps[a], m = p * ms[b];
          double F = cf[c][0], B = cf[c][1], W = cf[c][2];
          Costs k;
          costs(&k, p, F, B, W);
          PpSim sim;
          bubble_of(PP_ZBH1, p, 1, m, comms, &k, &sim);
          double idle = sim.makespan - m * (F + B + W), want = (p - 1) * (F + B - W);
          ck_assert_msg(fabs(idle - want) < 1e-9,
                        "zbh1 p=%d m=%d F=%g B=%g W=%g: idle %.12f, want %.12f", p, m, F, B, W,
                        idle, want);
          /* against 1F1B with the same costs: the idle time falls from
           * (p − 1)(F + B + W) */
          PpSim s1;
          Costs k1;
          costs(&k1, p, F, B, W);
          bubble_of(PP_1F1B, p, 1, m, comms, &k1, &s1);
          ck_assert(fabs(s1.makespan - m * (F + B + W) - (p - 1) * (F + B + W)) < 1e-9);
          for (int r = 0; r < p; r++) ck_assert_int_le(sim.max_inflight[r], p);
          pp_sim_free(&s1, p);
          pp_sim_free(&sim, p);
        }
}
END_TEST

START_TEST(text_form) {
  PpSchedule s;
  char err[128], buf[4096];
  ck_assert(pp_sched_build(&s, PP_1F1B, 2, 1, 2, err, sizeof err));
  pp_sched_add_comms(&s);
  FILE *f = fmemopen(buf, sizeof buf, "w");
  pp_sched_print(f, &s);
  fclose(f);
  ck_assert_str_eq(buf, "rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1\n"
                        "rank 1: 1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1\n");
  pp_sched_free(&s);
  ck_assert(pp_sched_build(&s, PP_INTERLEAVED, 2, 2, 2, err, sizeof err));
  f = fmemopen(buf, sizeof buf, "w");
  pp_sched_print(f, &s);
  fclose(f);
  /* m = p: every forward first (Megatron), chunks in order, backwards in reverse */
  ck_assert_str_eq(buf, "rank 0: 0F0 0F1 2F0 2F1 2B0 2B1 0B0 0B1\n"
                        "rank 1: 1F0 1F1 3F0 3F1 3B0 3B1 1B0 1B1\n");
  pp_sched_free(&s);
  ck_assert_int_eq(pp_sched_parse("zbh1"), PP_ZBH1);
  ck_assert_int_eq(pp_sched_parse("1F1B"), -1);
}
END_TEST

START_TEST(refused_combinations) {
  PpSchedule s;
  char err[256];
  ck_assert(!pp_sched_build(&s, PP_1F1B, 4, 1, 3, err, sizeof err));
  ck_assert_str_eq(err, "schedule 1f1b needs at least as many micro-batches as stages: "
                        "micro_batches = 3 < pp = 4");
  ck_assert(!pp_sched_build(&s, PP_INTERLEAVED, 4, 2, 6, err, sizeof err));
  ck_assert(strstr(err, "multiple of 4"));
  ck_assert(!pp_sched_build(&s, PP_GPIPE, 2, 2, 4, err, sizeof err));
  ck_assert(strstr(err, "needs schedule = interleaved"));
  ck_assert(!pp_sched_build(&s, PP_ZBH1, 0, 1, 4, err, sizeof err));
  /* GPipe runs with fewer micro-batches than stages */
  ck_assert(pp_sched_build(&s, PP_GPIPE, 4, 1, 2, err, sizeof err));
  pp_sched_free(&s);
}
END_TEST

/* Broken schedules: the simulator must say what is wrong. */
static void expect_failure(PpSchedule *s, const char *needle) {
  Costs k;
  costs(&k, s->p * s->v, 1, 1, 1);
  PpSim sim;
  ck_assert(!pp_sched_simulate(s, &k.c, &sim));
  ck_assert_msg(strstr(sim.msg, needle), "message '%s' lacks '%s'", sim.msg, needle);
  pp_sim_free(&sim, s->p);
}

START_TEST(broken_schedules_found) {
  PpSchedule s;
  char err[128];
  /* rank 1 runs a backward before the forward it needs: deadlock */
  ck_assert(pp_sched_build(&s, PP_1F1B, 2, 1, 2, err, sizeof err));
  PpAction t = s.act[1][0];
  s.act[1][0] = s.act[1][1];
  s.act[1][1] = t;
  expect_failure(&s, "deadlock");
  pp_sched_free(&s);
  /* a micro-batch's backward missing */
  ck_assert(pp_sched_build(&s, PP_GPIPE, 2, 1, 3, err, sizeof err));
  s.n[0]--;
  expect_failure(&s, "stage 0, micro-batch 2");
  pp_sched_free(&s);
  /* a stage run on the wrong rank */
  ck_assert(pp_sched_build(&s, PP_GPIPE, 2, 1, 3, err, sizeof err));
  s.act[0][0].stage = 1;
  expect_failure(&s, "is on rank 1");
  pp_sched_free(&s);
  /* two receives swapped: the messages of one channel arrive in send order */
  ck_assert(pp_sched_build(&s, PP_GPIPE, 2, 1, 2, err, sizeof err));
  pp_sched_add_comms(&s);
  ck_assert(s.act[1][0].kind == PP_RECV_F && s.act[1][2].kind == PP_RECV_F);
  s.act[1][0].mb = 1;
  s.act[1][2].mb = 0;
  expect_failure(&s, "matched by the receive");
  pp_sched_free(&s);
}
END_TEST

START_TEST(svg_timeline) {
  PpSchedule s;
  char err[128];
  ck_assert(pp_sched_build(&s, PP_ZBH1, 3, 1, 6, err, sizeof err));
  Costs k;
  costs(&k, 3, 1, 1, 1);
  PpSim sim;
  ck_assert(pp_sched_simulate(&s, &k.c, &sim));
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  pp_sched_svg(f, &s, &sim);
  fclose(f);
  int rects = 0;
  for (const char *q = buf; (q = strstr(q, "<rect x=")); q++) rects++;
  ck_assert_int_eq(rects, 3 * 6 * 3 + 4);  /* F, I, W per stage and micro-batch, and the legend */
  ck_assert(strstr(buf, "bubble 0.1111")); /* (p−1)·1 / (m·3) = 2/18 */
  free(buf);
  pp_sim_free(&sim, 3);
  pp_sched_free(&s);
}
END_TEST

int main(void) {
  Suite *su = suite_create("pp_sched");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, gpipe_and_1f1b_bubble);
  tcase_add_test(tc, interleaved_bubble);
  tcase_add_test(tc, zbh1_bubble);
  tcase_add_test(tc, text_form);
  tcase_add_test(tc, refused_combinations);
  tcase_add_test(tc, broken_schedules_found);
  tcase_add_test(tc, svg_timeline);
  suite_add_tcase(su, tc);
  SRunner *sr = srunner_create(su);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
