/* mmrt_feeders.c: the table of the trainer's data feeders, in the order they
 * are tried, and binding a model to the first that takes its inputs (see
 * mmrt_feed.h). */
#include <stdio.h>
#include <string.h>

#include "mmrt_feed.h"
#include "mmrt_loader.h"

const MmrtFeeder *const mmrt_feeders[] = {
    &mmrt_feed_text, &mmrt_feed_classify, &mmrt_feed_caption, &mmrt_feed_pixels,
    &mmrt_feed_dit,  &mmrt_feed_video,    &mmrt_feed_frames,  NULL};

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

const MmrtFeeder *mmrt_feed_bind(MmrtFeedCtx *c, char *err, size_t errlen) {
  for (int i = 0; mmrt_feeders[i]; i++) {
    int r = mmrt_feeders[i]->bind(c, err, errlen);
    if (r > 0 && mmrt_feeders[i] != &mmrt_feed_text && c->text && c->text->given) {
      snprintf(err, errlen,
               "%s: a text flag, but --data %s is not text (a .jsonl file or an "
               "indexed dataset's prefix) and model %s takes %s data",
               c->text->first, c->data ? c->data : "", c->m->name, mmrt_feeders[i]->name);
      return NULL;
    }
    if (r > 0) return mmrt_feeders[i];
    if (r < 0) return NULL;
  }
  const MmrtModelDesc *m = c->m;
  char got[512] = "", buf[128], want[1024] = "";
  for (int64_t i = 0; i < m->ninputs; i++) {
    shape_str(buf, sizeof buf, &m->inputs[i]);
    snprintf(got + strlen(got), sizeof got - strlen(got), "%s%s %s", i ? ", " : "",
             m->inputs[i].name, buf);
  }
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
