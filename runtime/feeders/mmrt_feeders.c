/* mmrt_feeders.c: the table of the trainer's data feeders, in the order they
 * are tried, and binding a model to the first that takes its inputs (see
 * mmrt_feed.h). */
#include <stdio.h>
#include <string.h>

#include "mmrt_feed.h"
#include "mmrt_loader.h"
#include "mmrt_vfiles.h"

const MmrtFeeder *const mmrt_feeders[] = {
    &mmrt_feed_text,   &mmrt_feed_classify, &mmrt_feed_caption,
    &mmrt_feed_pixels, &mmrt_feed_dit,      &mmrt_feed_video,
    &mmrt_feed_frames, &mmrt_feed_conv,     NULL};

static void shape_str(char *buf, size_t n, const MmrtTensorDesc *t) {
  size_t k = (size_t)snprintf(buf, n, "%s[", mmrt_st_dtype_name((MmrtStDtype)t->dtype));
  for (int64_t d = 0; d < t->ndim && k < n; d++)
    k += (size_t)snprintf(buf + k, n - k, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
  if (k < n) snprintf(buf + k, n - k, "]");
}

/* Appends to buf[0..n), never past it. */
static void append(char *buf, size_t n, const char *s) {
  size_t k = strlen(buf);
  if (k + 1 < n) snprintf(buf + k, n - k, "%s", s);
}

/* f->bind: 1 bound, 0 not this feeder's, -1 refused (err set) */
static int try_bind(MmrtFeedCtx *c, const MmrtFeeder *f, char *err, size_t errlen) {
  int r = f->bind(c, err, errlen);
  if (r > 0 && f != &mmrt_feed_text && f != &mmrt_feed_conv && c->text && c->text->given &&
      !(mmrt_vfiles_is(c->data) && !strcmp(c->text->first, "--bad-samples"))) {
    snprintf(err, errlen,
             "%s: a text flag, but --data %s is not text (a .jsonl file or an "
             "indexed dataset's prefix) and model %s takes %s data",
             c->text->first, c->data ? c->data : "", c->m->name, f->name);
    return -1;
  }
  return r;
}

/* "ids I32[8, 16], labels I32[8, 16]" */
static void inputs_str(char *got, size_t n, const MmrtModelDesc *m) {
  char buf[128];
  got[0] = 0;
  for (int64_t i = 0; i < m->ninputs; i++) {
    shape_str(buf, sizeof buf, &m->inputs[i]);
    snprintf(got + strlen(got), n - strlen(got), "%s%s %s", i ? ", " : "", m->inputs[i].name, buf);
  }
}

/* the model's declared format: its feeder, and nothing else */
static const MmrtFeeder *bind_declared(MmrtFeedCtx *c, char *err, size_t errlen) {
  const MmrtModelDesc *m = c->m;
  MmrtDataFormat fmt = mmrt_data_format(m->data_format);
  const MmrtFeeder *f = NULL;
  for (int i = 0; fmt != MMRT_FMT_AUTO && mmrt_feeders[i] && !f; i++)
    if (mmrt_feeders[i]->format == fmt) f = mmrt_feeders[i];
  if (!f) {
    snprintf(err, errlen,
             "model %s declares data format '%s', which this trainer has no feeder for", m->name,
             m->data_format);
    return NULL;
  }
  c->declared = 1;
  if (fmt == MMRT_FMT_TEXT && !mmrt_loader_is_text(c->data)) {
    snprintf(err, errlen,
             "model %s declares data format text, but --data %s is not text (a .jsonl file or an "
             "indexed dataset's PREFIX)",
             m->name, c->data ? c->data : "");
    return NULL;
  }
  int r = try_bind(c, f, err, errlen);
  if (r > 0) return f;
  if (r == 0) {
    char got[512];
    inputs_str(got, sizeof got, m);
    snprintf(err, errlen,
             "model %s declares data format %s (%s data), but its inputs (%s) are not the "
             "format's: expected %s; B = %lld",
             m->name, m->data_format, f->name, got, f->inputs, (long long)c->B);
  }
  return NULL;
}

const MmrtFeeder *mmrt_feed_bind(MmrtFeedCtx *c, char *err, size_t errlen) {
  c->declared = 0;
  if (c->m->data_format && c->m->data_format[0]) return bind_declared(c, err, errlen);
  for (int i = 0; mmrt_feeders[i]; i++) {
    int r = try_bind(c, mmrt_feeders[i], err, errlen);
    if (r > 0) return mmrt_feeders[i];
    if (r < 0) return NULL;
  }
  const MmrtModelDesc *m = c->m;
  char got[512], want[1024] = "";
  inputs_str(got, sizeof got, m);
  for (int i = 0; mmrt_feeders[i]; i++) {
    append(want, sizeof want, i ? (mmrt_feeders[i + 1] ? "; " : "; or ") : "");
    append(want, sizeof want, mmrt_feeders[i]->inputs);
    append(want, sizeof want, " (");
    append(want, sizeof want, mmrt_feeders[i]->name);
    append(want, sizeof want, ")");
  }
  snprintf(err, errlen,
           "cannot bind the inputs of model %s (%s) to a data feeder: expected %s; B = %lld",
           m->name, got, want, (long long)c->B);
  return NULL;
}
