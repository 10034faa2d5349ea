/* mmrt_conv.c: conversation datasets (LLaVA/InternVL JSON and JSONL) to ids
 * and label masks; the rules are in mmrt_conv.h. */
#include "mmrt_conv.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mmrt_image.h"

struct MmrtConv {
  char *path;
  MmrtTok *tok;
  MmrtConvOpts o;
  char *dir;
  char *buf; /* the whole file */
  size_t len;
  json_object *list; /* a JSON list file, or NULL for JSONL */
  size_t next;       /* list: the next index; JSONL: the byte offset */
  size_t index;      /* samples seen */
  size_t lineno;
  int32_t start_id, ctx_id, end_id; /* the image tokens' ids (-1: none) */
};

static void put(char **p, size_t *n, size_t *cap, const char *s, size_t k) {
  if (*n + k + 1 > *cap) {
    size_t c = *cap ? *cap : 256;
    while (c < *n + k + 1) c *= 2;
    char *q = realloc(*p, c);
    if (!q) abort();
    *p = q, *cap = c;
  }
  memcpy(*p + *n, s, k);
  *n += k;
  (*p)[*n] = 0;
}

static bool one_id(MmrtTok *t, const char *s, int32_t *id, const char *what, char *err,
                   size_t errlen) {
  *id = -1;
  if (!s || !*s) return true;
  MmrtTokIds ids = {0};
  char e[512];
  bool ok = mmrt_tok_encode(t, s, strlen(s), false, &ids, e, sizeof e) && ids.n == 1;
  if (ok) *id = ids.v[0];
  if (!ok)
    snprintf(err, errlen, "the image %s token '%s' is not one token of the tokenizer (%zu ids)",
             what, s, ids.n);
  free(ids.v);
  return ok;
}

MmrtConv *mmrt_conv_open(const char *path, MmrtTok *tok, const MmrtConvOpts *o, char *err,
                         size_t errlen) {
  if (!o->family) return snprintf(err, errlen, "no chat family given"), NULL;
  MmrtTokText probe = {0};
  bool fam_ok = mmrt_tok_chat_render(o->family, NULL, 0, &probe, err, errlen);
  free(probe.p);
  if (!fam_ok) return NULL;
  if (o->image_tokens <= 0 && (o->tile <= 0 || o->max_tiles <= 0 || o->tokens_per_tile <= 0)) {
    snprintf(err, errlen,
             "give a fixed count of tokens per image, or the tile size, the most "
             "tiles and the tokens per tile (all > 0)");
    return NULL;
  }
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    return NULL;
  }
  MmrtConv *c = calloc(1, sizeof *c);
  if (!c) abort();
  char chunk[65536];
  size_t cap = 0, k;
  while ((k = fread(chunk, 1, sizeof chunk, f)) > 0) put(&c->buf, &c->len, &cap, chunk, k);
  bool rerr = ferror(f);
  fclose(f);
  if (!c->buf) put(&c->buf, &c->len, &cap, "", 0);
  c->path = strdup(path);
  c->tok = tok;
  c->o = *o;
  c->dir = strdup(o->image_dir ? o->image_dir : ".");
  bool ivl = strcmp(o->family, "internvl2") == 0;
  if (!c->o.img_start) c->o.img_start = ivl ? "<img>" : "";
  if (!c->o.img_context) c->o.img_context = ivl ? "<IMG_CONTEXT>" : "<image>";
  if (!c->o.img_end) c->o.img_end = ivl ? "</img>" : "";
  if (rerr) {
    snprintf(err, errlen, "%s: cannot read: %s", path, strerror(errno));
    goto fail;
  }
  if (!one_id(tok, c->o.img_start, &c->start_id, "start", err, errlen) ||
      !one_id(tok, c->o.img_context, &c->ctx_id, "context", err, errlen) ||
      !one_id(tok, c->o.img_end, &c->end_id, "end", err, errlen))
    goto fail;
  if (c->ctx_id < 0) {
    snprintf(err, errlen, "the image context token is empty");
    goto fail;
  }
  size_t i = 0;
  while (i < c->len && strchr(" \t\r\n", c->buf[i])) i++;
  if (i < c->len && c->buf[i] == '[') {
    json_tokener *jt = json_tokener_new();
    c->list = json_tokener_parse_ex(jt, c->buf, (int)c->len);
    enum json_tokener_error je = json_tokener_get_error(jt);
    size_t at = json_tokener_get_parse_end(jt);
    json_tokener_free(jt);
    if (je != json_tokener_success || !json_object_is_type(c->list, json_type_array)) {
      size_t line = 1;
      for (size_t b = 0; b < at && b < c->len; b++) line += c->buf[b] == '\n';
      snprintf(err, errlen, "%s:%zu: not a JSON list of samples: %s", path, line,
               je == json_tokener_success ? "incomplete" : json_tokener_error_desc(je));
      goto fail;
    }
  }
  return c;
fail:
  mmrt_conv_close(c);
  return NULL;
}

void mmrt_conv_close(MmrtConv *c) {
  if (!c) return;
  if (c->list) json_object_put(c->list);
  free(c->buf), free(c->path), free(c->dir), free(c);
}

int32_t mmrt_conv_context_id(const MmrtConv *c) {
  return c->ctx_id;
}

void mmrt_conv_sample_free(MmrtConvSample *s) {
  free(s->id), free(s->ids.v), free(s->mask.v), free(s->tiles), free(s->image_tokens);
  for (int i = 0; s->paths && i < s->nimages; i++) free(s->paths[i]);
  free(s->paths);
  memset(s, 0, sizeof *s);
}

/* The message prefix "FILE[:LINE]: sample N (id "X"): " */
typedef struct Where {
  char pre[1024];
} Where;

static MmrtConvStatus say(char *err, size_t errlen, const Where *w, MmrtConvStatus st,
                          const char *fmt, ...) {
  char m[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(m, sizeof m, fmt, ap);
  va_end(ap);
  snprintf(err, errlen, "%s%s", w->pre, m);
  return st;
}

static size_t count_placeholders(const char *s) {
  size_t n = 0;
  for (const char *p = s; (p = strstr(p, "<image>")); p += 7) n++;
  return n;
}

static int role_of(const char *from) {
  if (!strcmp(from, "human") || !strcmp(from, "user")) return 0;
  if (!strcmp(from, "gpt") || !strcmp(from, "assistant")) return 1;
  if (!strcmp(from, "system")) return 2;
  return -1;
}

static MmrtConvStatus sample(MmrtConv *c, json_object *obj, MmrtConvSample *s, Where *w, char *err,
                             size_t errlen) {
  static const char *const roles[] = {"user", "assistant", "system"};
  if (!json_object_is_type(obj, json_type_object))
    return say(err, errlen, w, MMRT_CONV_BAD, "not a JSON object");
  json_object *jid, *jimg, *jconv;
  if (json_object_object_get_ex(obj, "id", &jid) && jid) {
    if (json_object_is_type(jid, json_type_string) || json_object_is_type(jid, json_type_int))
      s->id = strdup(json_object_get_string(jid));
    else
      return say(err, errlen, w, MMRT_CONV_BAD, "id: not a string or an integer");
    size_t n = strlen(w->pre);
    snprintf(w->pre + n - 2, sizeof w->pre - n + 2, " (id \"%.200s\"): ", s->id);
  } else {
    char b[32];
    snprintf(b, sizeof b, "%zu", s->index);
    s->id = strdup(b);
  }
  /* the conversation */
  if (!json_object_object_get_ex(obj, "conversations", &jconv) ||
      !json_object_is_type(jconv, json_type_array) || json_object_array_length(jconv) == 0)
    return say(err, errlen, w, MMRT_CONV_BAD, "conversations: missing, or not a non-empty list");
  size_t nt = json_object_array_length(jconv), holders = 0;
  for (size_t i = 0; i < nt; i++) {
    json_object *t = json_object_array_get_idx(jconv, i), *jf, *jv;
    if (!json_object_is_type(t, json_type_object) || !json_object_object_get_ex(t, "from", &jf) ||
        !json_object_is_type(jf, json_type_string) || !json_object_object_get_ex(t, "value", &jv) ||
        !json_object_is_type(jv, json_type_string))
      return say(err, errlen, w, MMRT_CONV_BAD,
                 "conversations[%zu]: not an object with a \"from\" and a \"value\" string", i);
    const char *from = json_object_get_string(jf);
    int r = role_of(from);
    if (r < 0)
      return say(err, errlen, w, MMRT_CONV_BAD,
                 "conversations[%zu].from: '%.100s' is not a role (human/user, gpt/assistant, "
                 "system)",
                 i, from);
    bool sys0 = i == 0 && r == 2;
    size_t first = 0;
    if (i > 0) {
      json_object *f0, *t0 = json_object_array_get_idx(jconv, 0);
      json_object_object_get_ex(t0, "from", &f0);
      first = role_of(json_object_get_string(f0)) == 2;
    }
    int want = (int)((i - first) % 2);
    if (!sys0 && r != want)
      return say(err, errlen, w, MMRT_CONV_BAD,
                 "conversations[%zu].from: '%s' where a %s turn is expected (human and gpt "
                 "alternate from a human turn; system only first)",
                 i, from, want ? "gpt" : "human");
    if (i == nt - 1 && r != 1)
      return say(err, errlen, w, MMRT_CONV_BAD,
                 "conversations[%zu].from: '%s' ends the conversation (the last turn must be "
                 "gpt's, else it has nothing to learn from)",
                 i, from);
    holders += count_placeholders(json_object_get_string(jv));
  }
  /* the images */
  size_t nimg = 0;
  if (json_object_object_get_ex(obj, "image", &jimg) && jimg) {
    if (json_object_is_type(jimg, json_type_string))
      nimg = 1;
    else if (json_object_is_type(jimg, json_type_array)) {
      nimg = json_object_array_length(jimg);
      for (size_t i = 0; i < nimg; i++)
        if (!json_object_is_type(json_object_array_get_idx(jimg, i), json_type_string))
          return say(err, errlen, w, MMRT_CONV_BAD, "image[%zu]: not a file name", i);
    } else
      return say(err, errlen, w, MMRT_CONV_BAD, "image: not a file name or a list of them");
  }
  if (holders != nimg)
    return say(err, errlen, w, MMRT_CONV_BAD,
               "conversations: %zu <image> placeholder%s for %zu image%s (one for each image)",
               holders, holders == 1 ? "" : "s", nimg, nimg == 1 ? "" : "s");
  s->nimages = (int)nimg;
  s->tiles = calloc(nimg + 1, sizeof *s->tiles);
  s->image_tokens = calloc(nimg + 1, sizeof *s->image_tokens);
  s->paths = calloc(nimg + 1, sizeof *s->paths);
  if (!s->tiles || !s->image_tokens || !s->paths) abort();
  for (size_t i = 0; i < nimg; i++) {
    json_object *ji =
        json_object_is_type(jimg, json_type_array) ? json_object_array_get_idx(jimg, i) : jimg;
    const char *name = json_object_get_string(ji);
    char path[4096], e[1024];
    if (name[0] == '/')
      snprintf(path, sizeof path, "%s", name);
    else
      snprintf(path, sizeof path, "%s/%s", c->dir, name);
    MmrtImage im;
    if (!(s->paths[i] = strdup(path))) abort();
    if (mmrt_image_read(path, c->o.max_pixels, &im, e, sizeof e) != 0)
      return say(err, errlen, w, MMRT_CONV_BAD, "image[%zu] '%.200s': %s", i, name, e);
    if (c->o.image_tokens > 0) {
      s->tiles[i] = 1, s->image_tokens[i] = c->o.image_tokens;
    } else {
      MmrtTileGrid g = mmrt_image_tile_grid(im.w, im.h, c->o.tile, 1, c->o.max_tiles);
      s->tiles[i] = g.cols * g.rows + g.thumbnail;
      s->image_tokens[i] = s->tiles[i] * c->o.tokens_per_tile;
    }
    mmrt_image_free(&im);
  }
  /* expand the placeholders and encode */
  MmrtTokMsg *msgs = calloc(nt, sizeof *msgs);
  char **texts = calloc(nt, sizeof *texts);
  if (!msgs || !texts) abort();
  size_t k = 0;
  for (size_t i = 0; i < nt; i++) {
    json_object *t = json_object_array_get_idx(jconv, i), *jf, *jv;
    json_object_object_get_ex(t, "from", &jf), json_object_object_get_ex(t, "value", &jv);
    const char *v = json_object_get_string(jv);
    size_t vn = (size_t)json_object_get_string_len(jv), n = 0, cap = 0;
    char *out = NULL;
    const char *p = v, *q;
    while ((q = strstr(p, "<image>")) && q < v + vn) {
      put(&out, &n, &cap, p, (size_t)(q - p));
      put(&out, &n, &cap, c->o.img_start, strlen(c->o.img_start));
      for (int j = 0; j < s->image_tokens[k]; j++)
        put(&out, &n, &cap, c->o.img_context, strlen(c->o.img_context));
      put(&out, &n, &cap, c->o.img_end, strlen(c->o.img_end));
      p = q + 7, k++;
    }
    put(&out, &n, &cap, p, (size_t)(v + vn - p));
    texts[i] = out;
    msgs[i].role = roles[role_of(json_object_get_string(jf))];
    msgs[i].content = out, msgs[i].content_len = n;
  }
  char e[1024];
  bool ok = mmrt_tok_chat_encode(c->tok, c->o.family, msgs, nt, &s->ids, &s->mask, e, sizeof e);
  for (size_t i = 0; i < nt; i++) free(texts[i]);
  free(texts), free(msgs);
  if (!ok) return say(err, errlen, w, MMRT_CONV_BAD, "conversations: %s", e);
  size_t T = c->o.seq_len;
  if (T && s->ids.n > T) {
    size_t img = 0, last = 0;
    for (size_t i = 0; i < s->ids.n; i++)
      if (s->ids.v[i] == c->ctx_id || (c->end_id >= 0 && s->ids.v[i] == c->end_id) ||
          (c->start_id >= 0 && s->ids.v[i] == c->start_id))
        img++, last = i + 1;
    if (c->o.too_long == MMRT_CONV_FAIL)
      return say(err, errlen, w, MMRT_CONV_BAD,
                 "%zu tokens (%zu of them image tokens) exceed the sequence length %zu", s->ids.n,
                 img, T);
    if (c->o.too_long == MMRT_CONV_DROP)
      return say(err, errlen, w, MMRT_CONV_DROPPED,
                 "%zu tokens (%zu of them image tokens) exceed the sequence length %zu: dropped",
                 s->ids.n, img, T);
    if (last > T)
      return say(err, errlen, w, MMRT_CONV_DROPPED,
                 "%zu tokens exceed the sequence length %zu and cutting them would cut the "
                 "image tokens (which end at token %zu): dropped",
                 s->ids.n, T, last);
    s->ids.n = T, s->mask.n = T, s->truncated = true;
  }
  return MMRT_CONV_OK;
}

MmrtConvStatus mmrt_conv_next(MmrtConv *c, MmrtConvSample *s, char *err, size_t errlen) {
  memset(s, 0, sizeof *s);
  Where w;
  json_object *obj = NULL;
  bool own = false;
  if (c->list) {
    if (c->next >= json_object_array_length(c->list)) return MMRT_CONV_EOF;
    obj = json_object_array_get_idx(c->list, c->next++);
    s->index = c->index++;
    snprintf(w.pre, sizeof w.pre, "%s: sample %zu: ", c->path, s->index);
  } else {
    const char *b, *e;
    for (;;) {
      if (c->next >= c->len) return MMRT_CONV_EOF;
      b = c->buf + c->next;
      e = memchr(b, '\n', c->len - c->next);
      if (!e) e = c->buf + c->len;
      c->next = (size_t)(e - c->buf) + 1;
      c->lineno++;
      const char *p = b;
      while (p < e && strchr(" \t\r", *p)) p++;
      if (p < e) break;
    }
    s->index = c->index++, s->line = c->lineno;
    snprintf(w.pre, sizeof w.pre, "%s:%zu: sample %zu: ", c->path, c->lineno, s->index);
    json_tokener *jt = json_tokener_new();
    obj = json_tokener_parse_ex(jt, b, (int)(e - b));
    enum json_tokener_error je = json_tokener_get_error(jt);
    const char *end = b + json_tokener_get_parse_end(jt);
    json_tokener_free(jt);
    while (end < e && strchr(" \t\r", *end)) end++;
    if (je == json_tokener_success && obj && end < e) je = json_tokener_error_parse_unexpected;
    if (je != json_tokener_success || !obj) {
      if (obj) json_object_put(obj);
      return say(err, errlen, &w, MMRT_CONV_BAD, "not one JSON object: %s",
                 je == json_tokener_success ? "incomplete" : json_tokener_error_desc(je));
    }
    own = true;
  }
  MmrtConvStatus st = sample(c, obj, s, &w, err, errlen);
  if (own) json_object_put(obj);
  if (st != MMRT_CONV_OK) {
    size_t index = s->index;
    mmrt_conv_sample_free(s);
    s->index = index;
  }
  return st;
}
