/* Pipeline schedules as data: generators, transfers, a discrete-event
 * simulator and an SVG timeline. See pp_sched.h. */
#include "pp_sched.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char *const kind_names[PP_NKINDS] = {
    [PP_F] = "F",           [PP_B] = "B",           [PP_I] = "I",           [PP_W] = "W",
    [PP_SEND_F] = "SEND_F", [PP_RECV_F] = "RECV_F", [PP_SEND_B] = "SEND_B", [PP_RECV_B] = "RECV_B"};

const char *pp_sched_name(PpSchedKind k) {
  return k < PP_NSCHEDS ? mm_schedule_names[k] : "?";
}
const char *pp_kind_name(PpKind k) {
  return k < PP_NKINDS ? kind_names[k] : "?";
}

int pp_sched_parse(const char *name) {
  return mm_schedule_parse(name);
}

static void *xcalloc(size_t n, size_t sz) {
  void *p = calloc(n ? n : 1, sz);
  if (!p) {
    fprintf(stderr, "mmc: out of memory (pipeline schedule)\n");
    exit(1);
  }
  return p;
}

/* Every list has room for all its compute actions (F, I, W per stage and
 * micro-batch) and all four transfers. */
static int capacity(const PpSchedule *s) {
  return 7 * s->v * s->m + 8;
}

static void push(PpSchedule *s, int r, PpKind k, int stage, int mb) {
  s->act[r][s->n[r]++] = (PpAction){k, stage, mb};
}

static void gen_gpipe(PpSchedule *s, int r) {
  for (int mb = 0; mb < s->m; mb++) push(s, r, PP_F, r, mb);
  for (int mb = 0; mb < s->m; mb++) push(s, r, PP_B, r, mb);
}

static void gen_1f1b(PpSchedule *s, int r) {
  int warm = s->p - r - 1 < s->m ? s->p - r - 1 : s->m;
  for (int mb = 0; mb < warm; mb++) push(s, r, PP_F, r, mb);
  for (int i = 0; i < s->m - warm; i++) {
    push(s, r, PP_F, r, warm + i);
    push(s, r, PP_B, r, i);
  }
  for (int i = s->m - warm; i < s->m; i++) push(s, r, PP_B, r, i);
}

/* ZB-H1: 1F1B's order of forwards and input-gradient backwards; rank r
 * holds back r weight-gradient passes, so that the input gradients travel
 * to the earlier stages first and the held-back W fill what would be the
 * cool-down bubble. */
static void gen_zbh1(PpSchedule *s, int r) {
  int warm = s->p - r - 1 < s->m ? s->p - r - 1 : s->m, nextw = 0;
  for (int mb = 0; mb < warm; mb++) push(s, r, PP_F, r, mb);
  for (int i = 0; i < s->m; i++) {
    if (i < s->m - warm) push(s, r, PP_F, r, warm + i);
    push(s, r, PP_I, r, i);
    if (i - r >= 0) push(s, r, PP_W, r, nextw++);
  }
  while (nextw < s->m) push(s, r, PP_W, r, nextw++);
}

/* Interleaved 1F1B (Narayanan et al. 2021, as Megatron orders it): the
 * k-th forward of a rank is of chunk (k mod p·v) / p and micro-batch
 * (k / p·v)·p + k mod p; backwards visit the chunks in reverse. Warm-up
 * 2(p − r − 1) + (v − 1)·p forwards (all of them when m = p). */
static void interleaved_at(const PpSchedule *s, int r, int k, bool fwd, int *stage, int *mb) {
  int pv = s->p * s->v, chunk = (k % pv) / s->p;
  if (!fwd) chunk = s->v - 1 - chunk;
  *stage = chunk * s->p + r;
  *mb = (k / pv) * s->p + k % s->p;
}

static void gen_interleaved(PpSchedule *s, int r) {
  int total = s->m * s->v, warm = 2 * (s->p - r - 1) + (s->v - 1) * s->p, st, mb;
  if (s->m == s->p || warm > total) warm = total;
  for (int k = 0; k < warm; k++) {
    interleaved_at(s, r, k, true, &st, &mb);
    push(s, r, PP_F, st, mb);
  }
  for (int k = 0; k < total - warm; k++) {
    interleaved_at(s, r, k + warm, true, &st, &mb);
    push(s, r, PP_F, st, mb);
    interleaved_at(s, r, k, false, &st, &mb);
    push(s, r, PP_B, st, mb);
  }
  for (int k = total - warm; k < total; k++) {
    interleaved_at(s, r, k, false, &st, &mb);
    push(s, r, PP_B, st, mb);
  }
}

bool pp_sched_build(PpSchedule *s, PpSchedKind kind, int p, int v, int m, char *err, size_t errn) {
  memset(s, 0, sizeof *s);
  if (!mm_schedule_check(kind, p, v, m, err, errn)) return false;
  s->kind = kind;
  s->p = p;
  s->v = v;
  s->m = m;
  s->n = xcalloc((size_t)p, sizeof *s->n);
  s->act = xcalloc((size_t)p, sizeof *s->act);
  for (int r = 0; r < p; r++) {
    s->act[r] = xcalloc((size_t)capacity(s), sizeof **s->act);
    switch (kind) {
      case PP_GPIPE: gen_gpipe(s, r); break;
      case PP_1F1B: gen_1f1b(s, r); break;
      case PP_INTERLEAVED:
        if (v == 1)
          gen_1f1b(s, r);
        else
          gen_interleaved(s, r);
        break;
      case PP_ZBH1: gen_zbh1(s, r); break;
      default: break;
    }
  }
  return true;
}

void pp_sched_free(PpSchedule *s) {
  if (!s->act) return;
  for (int r = 0; r < s->p; r++) free(s->act[r]);
  free(s->act);
  free(s->n);
  memset(s, 0, sizeof *s);
}

static int stage_rank(const PpSchedule *s, int stage) {
  return stage % s->p;
}
static int nstages(const PpSchedule *s) {
  return s->p * s->v;
}
static bool is_backward_in(PpKind k) {
  return k == PP_B || k == PP_I;
}

void pp_sched_add_comms(PpSchedule *s) {
  int S = nstages(s);
  for (int r = 0; r < s->p; r++) {
    PpAction *old = s->act[r], *neu = xcalloc((size_t)capacity(s), sizeof *neu);
    int n = 0;
    for (int k = 0; k < s->n[r]; k++) {
      PpAction a = old[k];
      if (a.kind == PP_F && a.stage > 0 && stage_rank(s, a.stage - 1) != r)
        neu[n++] = (PpAction){PP_RECV_F, a.stage, a.mb};
      if (is_backward_in(a.kind) && a.stage < S - 1 && stage_rank(s, a.stage + 1) != r)
        neu[n++] = (PpAction){PP_RECV_B, a.stage, a.mb};
      neu[n++] = a;
      if (a.kind == PP_F && a.stage < S - 1 && stage_rank(s, a.stage + 1) != r)
        neu[n++] = (PpAction){PP_SEND_F, a.stage, a.mb};
      if (is_backward_in(a.kind) && a.stage > 0 && stage_rank(s, a.stage - 1) != r)
        neu[n++] = (PpAction){PP_SEND_B, a.stage, a.mb};
    }
    free(old);
    s->act[r] = neu;
    s->n[r] = n;
  }
}

int pp_action_format(const PpAction *a, char *buf, size_t n) {
  return snprintf(buf, n, "%d%s%d", a->stage, pp_kind_name(a->kind), a->mb);
}

void pp_sched_print(FILE *f, const PpSchedule *s) {
  char b[48];
  for (int r = 0; r < s->p; r++) {
    fprintf(f, "rank %d:", r);
    for (int k = 0; k < s->n[r]; k++) {
      pp_action_format(&s->act[r][k], b, sizeof b);
      fprintf(f, " %s", b);
    }
    fputc('\n', f);
  }
}

/* ---- the simulator ---- */

enum { EV_F, EV_BI, EV_W, EV_SEND_F, EV_SEND_B, EV_RECV_F, EV_RECV_B, EV_N };

typedef struct {
  const PpSchedule *s;
  int S, m;
  double *t[EV_N]; /* end time per (stage, mb); < 0: not yet */
} Sim;

static size_t at(const Sim *x, int stage, int mb) {
  return (size_t)stage * (size_t)x->m + (size_t)mb;
}

static double action_cost(const PpCosts *c, const PpAction *a) {
  switch (a->kind) {
    case PP_F: return c->f[a->stage];
    case PP_B: return c->i[a->stage] + c->w[a->stage];
    case PP_I: return c->i[a->stage];
    case PP_W: return c->w[a->stage];
    default: return 0;
  }
}

/* The time the action may start (dependencies only), or -1 while one of
 * them has not happened yet. has_comms: cross-rank edges go through
 * explicit transfers. */
static double ready_time(const Sim *x, const PpAction *a, bool has_comms, double comm) {
  const PpSchedule *s = x->s;
  int st = a->stage, mb = a->mb, r = stage_rank(s, st);
  double t = 0;
#define NEED(ev, stg)                                                                              \
  do {                                                                                             \
    double e_ = x->t[ev][at(x, (stg), mb)];                                                        \
    if (e_ < 0) return -1;                                                                         \
    if (e_ > t) t = e_;                                                                            \
  } while (0)
#define NEED_PLUS(ev, stg, lat)                                                                    \
  do {                                                                                             \
    double e_ = x->t[ev][at(x, (stg), mb)];                                                        \
    if (e_ < 0) return -1;                                                                         \
    if (e_ + (lat) > t) t = e_ + (lat);                                                            \
  } while (0)
  switch (a->kind) {
    case PP_F:
      if (st > 0) {
        if (stage_rank(s, st - 1) == r)
          NEED(EV_F, st - 1);
        else if (has_comms)
          NEED(EV_RECV_F, st);
        else
          NEED_PLUS(EV_F, st - 1, comm);
      }
      break;
    case PP_B:
    case PP_I:
      NEED(EV_F, st);
      if (st < x->S - 1) {
        if (stage_rank(s, st + 1) == r)
          NEED(EV_BI, st + 1);
        else if (has_comms)
          NEED(EV_RECV_B, st);
        else
          NEED_PLUS(EV_BI, st + 1, comm);
      }
      break;
    case PP_W: NEED(EV_BI, st); break;
    case PP_SEND_F: NEED(EV_F, st); break;
    case PP_SEND_B: NEED(EV_BI, st); break;
    case PP_RECV_F: NEED_PLUS(EV_SEND_F, st - 1, comm); break;
    case PP_RECV_B: NEED_PLUS(EV_SEND_B, st + 1, comm); break;
    default: return -1;
  }
#undef NEED
#undef NEED_PLUS
  return t;
}

static int event_of(PpKind k) {
  switch (k) {
    case PP_F: return EV_F;
    case PP_B:
    case PP_I: return EV_BI;
    case PP_W: return EV_W;
    case PP_SEND_F: return EV_SEND_F;
    case PP_SEND_B: return EV_SEND_B;
    case PP_RECV_F: return EV_RECV_F;
    case PP_RECV_B: return EV_RECV_B;
    default: return -1;
  }
}

static bool sim_fail(PpSim *o, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(o->msg, sizeof o->msg, fmt, ap);
  va_end(ap);
  o->ok = false;
  return false;
}

/* Static checks: every action on the rank that holds its stage, in range;
 * each (stage, mb) has one forward and either one B or one I and one W;
 * every transfer has its partner, and on each channel (from rank, to rank,
 * direction) the k-th send is the k-th receive's message. */
static bool check_static(const PpSchedule *s, PpSim *o, bool *has_comms) {
  int S = nstages(s), m = s->m;
  size_t N = (size_t)S * (size_t)m;
  int *cnt = xcalloc(N * PP_NKINDS, sizeof *cnt);
  char b[48];
  bool ok = true;
  *has_comms = false;
  for (int r = 0; r < s->p && ok; r++)
    for (int k = 0; k < s->n[r]; k++) {
      const PpAction *a = &s->act[r][k];
      pp_action_format(a, b, sizeof b);
      if (a->kind >= PP_NKINDS || a->stage < 0 || a->stage >= S || a->mb < 0 || a->mb >= m) {
        ok = sim_fail(o, "rank %d: action %s out of range", r, b);
        break;
      }
      if (stage_rank(s, a->stage) != r) {
        ok = sim_fail(o, "rank %d runs %s, but stage %d is on rank %d", r, b, a->stage,
                      stage_rank(s, a->stage));
        break;
      }
      if (a->kind >= PP_SEND_F) *has_comms = true;
      cnt[(size_t)a->kind * N + (size_t)a->stage * m + a->mb]++;
    }
  for (int st = 0; st < S && ok; st++)
    for (int mb = 0; mb < m && ok; mb++) {
      size_t i = (size_t)st * m + mb;
#define C(k) cnt[(size_t)(k) * N + i]
      if (C(PP_F) != 1)
        ok = sim_fail(o, "stage %d, micro-batch %d: %d forwards", st, mb, C(PP_F));
      else if (!((C(PP_B) == 1 && C(PP_I) == 0 && C(PP_W) == 0) ||
                 (C(PP_B) == 0 && C(PP_I) == 1 && C(PP_W) == 1)))
        ok = sim_fail(o, "stage %d, micro-batch %d: %d B, %d I, %d W (one B, or one I and one W)",
                      st, mb, C(PP_B), C(PP_I), C(PP_W));
      else if (*has_comms) {
        bool fx = st < S - 1 && stage_rank(s, st) != stage_rank(s, st + 1);
        bool bx = st > 0 && stage_rank(s, st) != stage_rank(s, st - 1);
        if (C(PP_SEND_F) != fx || (st > 0 && cnt[(size_t)PP_RECV_F * N + i] != bx) ||
            C(PP_SEND_B) != bx || (st < S - 1 && cnt[(size_t)PP_RECV_B * N + i] != fx))
          ok = sim_fail(o, "stage %d, micro-batch %d: transfers do not pair up", st, mb);
      }
#undef C
    }
  free(cnt);
  if (!ok || !*has_comms) return ok;
  /* channel order: for each (src, dst, dir) the sends in the sender's order
   * and the receives in the receiver's order name the same messages */
  for (int src = 0; src < s->p && ok; src++)
    for (int dst = 0; dst < s->p && ok; dst++)
      for (int dir = 0; dir < 2 && ok; dir++) {
        PpKind sk = dir ? PP_SEND_B : PP_SEND_F, rk = dir ? PP_RECV_B : PP_RECV_F;
        int i = 0, j = 0;
        for (;;) {
          while (i < s->n[src] && !(s->act[src][i].kind == sk &&
                                    stage_rank(s, s->act[src][i].stage + (dir ? -1 : 1)) == dst))
            i++;
          while (j < s->n[dst] && !(s->act[dst][j].kind == rk &&
                                    stage_rank(s, s->act[dst][j].stage + (dir ? 1 : -1)) == src))
            j++;
          if (i == s->n[src] || j == s->n[dst]) break;
          const PpAction *sa = &s->act[src][i], *ra = &s->act[dst][j];
          if (sa->mb != ra->mb || sa->stage + (dir ? -1 : 1) != ra->stage) {
            char b2[48];
            pp_action_format(sa, b, sizeof b);
            pp_action_format(ra, b2, sizeof b2);
            ok = sim_fail(o,
                          "rank %d -> rank %d: the send %s is matched by the receive %s (MPI "
                          "matches one tag's messages in order)",
                          src, dst, b, b2);
          }
          i++;
          j++;
        }
      }
  return ok;
}

bool pp_sched_simulate(const PpSchedule *s, const PpCosts *c, PpSim *o) {
  memset(o, 0, sizeof *o);
  o->ok = true;
  int p = s->p;
  o->busy = xcalloc((size_t)p, sizeof *o->busy);
  o->max_inflight = xcalloc((size_t)p, sizeof *o->max_inflight);
  o->start = xcalloc((size_t)p, sizeof *o->start);
  o->end = xcalloc((size_t)p, sizeof *o->end);
  for (int r = 0; r < p; r++) {
    o->start[r] = xcalloc((size_t)s->n[r], sizeof **o->start);
    o->end[r] = xcalloc((size_t)s->n[r], sizeof **o->end);
  }
  bool has_comms;
  if (!check_static(s, o, &has_comms)) return false;
  Sim x = {.s = s, .S = nstages(s), .m = s->m};
  size_t N = (size_t)x.S * (size_t)x.m;
  for (int e = 0; e < EV_N; e++) {
    x.t[e] = xcalloc(N, sizeof *x.t[e]);
    for (size_t i = 0; i < N; i++) x.t[e][i] = -1;
  }
  int *idx = xcalloc((size_t)p, sizeof *idx), *live = xcalloc((size_t)p, sizeof *live);
  double *tfree = xcalloc((size_t)p, sizeof *tfree);
  int left = 0;
  for (int r = 0; r < p; r++) left += s->n[r];
  while (left > 0) {
    bool progress = false;
    for (int r = 0; r < p; r++)
      while (idx[r] < s->n[r]) {
        const PpAction *a = &s->act[r][idx[r]];
        double t = ready_time(&x, a, has_comms, c->comm);
        if (t < 0) break;
        if (t < tfree[r]) t = tfree[r];
        double d = action_cost(c, a);
        o->start[r][idx[r]] = t;
        o->end[r][idx[r]] = t + d;
        tfree[r] = t + d;
        o->busy[r] += d;
        int ev = event_of(a->kind);
        if (ev >= 0) x.t[ev][at(&x, a->stage, a->mb)] = t + d;
        if (a->kind == PP_F && ++live[r] > o->max_inflight[r]) o->max_inflight[r] = live[r];
        if (a->kind == PP_B || a->kind == PP_W) live[r]--;
        idx[r]++;
        left--;
        progress = true;
      }
    if (!progress) {
      char msg[200] = "", b[48];
      size_t len = 0;
      for (int r = 0; r < p && len < sizeof msg - 40; r++)
        if (idx[r] < s->n[r]) {
          pp_action_format(&s->act[r][idx[r]], b, sizeof b);
          len += (size_t)snprintf(msg + len, sizeof msg - len, "%srank %d at %s", len ? ", " : "",
                                  r, b);
        }
      sim_fail(o, "deadlock: every rank waits (%s)", msg);
      break;
    }
  }
  double total = 0;
  for (int r = 0; r < p; r++) {
    if (tfree[r] > o->makespan) o->makespan = tfree[r];
    total += o->busy[r];
  }
  o->bubble = total > 0 ? (p * o->makespan - total) / total : 0;
  for (int e = 0; e < EV_N; e++) free(x.t[e]);
  free(idx);
  free(live);
  free(tfree);
  return o->ok;
}

void pp_sim_free(PpSim *o, int p) {
  if (o->start)
    for (int r = 0; r < p; r++) {
      free(o->start[r]);
      free(o->end[r]);
    }
  free(o->start);
  free(o->end);
  free(o->busy);
  free(o->max_inflight);
  memset(o, 0, sizeof *o);
}

int pp_sched_slots(const PpSchedule *s, int r) {
  int *first = xcalloc((size_t)s->m + 1, sizeof *first),
      *last = xcalloc((size_t)s->m + 1, sizeof *last);
  for (int k = 0; k < s->m; k++) first[k] = last[k] = -1;
  for (int i = 0; i < s->n[r]; i++) {
    const PpAction *a = &s->act[r][i];
    if (a->kind > PP_W) continue;
    if (first[a->mb] < 0) first[a->mb] = i;
    last[a->mb] = i;
  }
  int held = 0, most = 0;
  for (int i = 0; i < s->n[r]; i++) {
    int k = s->act[r][i].mb;
    if (s->act[r][i].kind > PP_W) continue;
    if (first[k] == i && ++held > most) most = held;
    if (last[k] == i) held--;
  }
  free(first);
  free(last);
  return most;
}

/* ---- the timeline ---- */

void pp_sched_svg(FILE *f, const PpSchedule *s, const PpSim *sim) {
  pp_sched_svg_labelled(f, s, sim, NULL);
}

void pp_sched_svg_labelled(FILE *f, const PpSchedule *s, const PpSim *sim,
                           const char *const *labels) {
  const double W = 960, row = 28, top = 30;
  double left = 70;
  for (int r = 0; labels && r < s->p; r++)
    if (labels[r] && 7.0 * (double)strlen(labels[r]) + 10 > left)
      left = 7.0 * (double)strlen(labels[r]) + 10;
  double scale = sim->makespan > 0 ? W / sim->makespan : 1;
  static const char *const fill[PP_NKINDS] = {
      [PP_F] = "#4e79a7", [PP_B] = "#59a14f", [PP_I] = "#8cd17d", [PP_W] = "#f28e2b"};
  fprintf(f,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
          "font-family=\"monospace\" font-size=\"11\">\n",
          left + W + 20, top + row * s->p + 40);
  fprintf(f,
          "<text x=\"4\" y=\"18\">%s: pp = %d, vpp = %d, micro-batches = %d; makespan %.4g, "
          "bubble %.4f</text>\n",
          pp_sched_name(s->kind), s->p, s->v, s->m, sim->makespan, sim->bubble);
  for (int r = 0; r < s->p; r++) {
    double y = top + r * row;
    if (labels && labels[r])
      fprintf(f, "<text x=\"4\" y=\"%.1f\">%s</text>\n", y + row * 0.65, labels[r]);
    else
      fprintf(f, "<text x=\"4\" y=\"%.1f\">rank %d</text>\n", y + row * 0.65, r);
    for (int k = 0; k < s->n[r]; k++) {
      const PpAction *a = &s->act[r][k];
      double x0 = left + sim->start[r][k] * scale, w = (sim->end[r][k] - sim->start[r][k]) * scale;
      if (a->kind >= PP_SEND_F || w <= 0) continue;
      fprintf(f,
              "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\" "
              "stroke=\"#222\" stroke-width=\"0.5\"><title>%d%s%d</title></rect>\n",
              x0, y + 2, w, row - 4, fill[a->kind], a->stage, pp_kind_name(a->kind), a->mb);
      if (w >= 14) {
        if (s->v > 1)
          fprintf(f, "<text x=\"%.2f\" y=\"%.1f\" fill=\"#fff\">%d.%d</text>\n", x0 + 2,
                  y + row * 0.65, a->stage / s->p, a->mb);
        else
          fprintf(f, "<text x=\"%.2f\" y=\"%.1f\" fill=\"#fff\">%d</text>\n", x0 + 2,
                  y + row * 0.65, a->mb);
      }
    }
  }
  double ly = top + row * s->p + 20;
  const PpKind legend[] = {PP_F, PP_B, PP_I, PP_W};
  for (int i = 0; i < 4; i++) {
    fprintf(f, "<rect x=\"%d\" y=\"%.1f\" width=\"12\" height=\"12\" fill=\"%s\"/>", 70 + 110 * i,
            ly - 10, fill[legend[i]]);
    fprintf(f, "<text x=\"%d\" y=\"%.1f\">%s</text>\n", 86 + 110 * i, ly,
            legend[i] == PP_F   ? "forward"
            : legend[i] == PP_B ? "backward"
            : legend[i] == PP_I ? "input grad"
                                : "weight grad");
  }
  fprintf(f, "</svg>\n");
}
