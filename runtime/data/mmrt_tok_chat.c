/* mmrt_tok_chat.c: chat formats of the supported model families: messages
 * [{role, content}] rendered as the family's published template renders
 * them, encoded with the tokenizer, and a per-token mask of the assistant
 * spans (what the loss is taken on).
 *
 * Families (the text each renders; the assistant span marked [...]):
 *   chatml    <|im_start|>ROLE\nCONTENT<|im_end|>\n per message, no system
 *             added; span: [CONTENT<|im_end|>] of assistant messages
 *   qwen2     chatml, with Qwen2-Instruct's default system message
 *             "You are a helpful assistant." when the first message is not a
 *             system one (the chat_template of Qwen/Qwen2-7B-Instruct's
 *             tokenizer_config.json)
 *   internvl2 InternVL2's "Hermes-2"/"internlm2-chat" templates
 *             (internvl_chat/internvl/conversation.py, SeparatorStyle.MPT,
 *             sep <|im_end|>): <|im_start|>system\nSYSTEM<|im_end|> then
 *             <|im_start|>ROLE\nCONTENT<|im_end|> with no newline between
 *             messages; SYSTEM its default unless a system message is given;
 *             span: [CONTENT<|im_end|>]
 *   llama2    Llama-2-chat (meta-llama/Llama-2-7b-chat-hf's chat_template):
 *             <s>[INST] USER [/INST][ ANSWER </s>] per turn, contents
 *             stripped, a system message as <<SYS>>\nSYSTEM\n<</SYS>>\n\n
 *             ahead of the first user content
 *   vicuna    LLaVA-1.5's vicuna_v1 (llava/conversation.py conv_vicuna_v1,
 *             SeparatorStyle.TWO): BOS, then SYSTEM USER: U ASSISTANT:[ A</s>]
 *             USER: ... with its default system message unless one is given
 * llama2 and vicuna need user/assistant turns alternating from a user one.
 * The ids are the tokenizer's encoding of the rendered text without its
 * post-processor (vicuna: the "<s>" id ahead, as tokenizer(prompt) adds it).
 * A token is in the mask when it holds any byte of a span: the tokens up to
 * a span boundary are found as the common prefix of the ids of the text
 * before the boundary and of the whole text. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistr.h>

#include "mmrt_tok.h"
#include "mmrt_tok_int.h"

enum { F_CHATML, F_QWEN2, F_INTERNVL2, F_LLAMA2, F_VICUNA };
static const char *const families[] = {"chatml", "qwen2", "internvl2", "llama2", "vicuna", NULL};

const char *mmrt_tok_chat_families(void) {
  return "chatml, qwen2, internvl2, llama2, vicuna";
}

typedef struct Span {
  size_t a, b;
} Span;

typedef struct Render {
  TkBuf text;
  Span *spans;
  size_t nspans;
} Render;

static void put(Render *r, const char *s) {
  tk_buf_put(&r->text, s, strlen(s));
}

static void span_open(Render *r) {
  r->spans = realloc(r->spans, (r->nspans + 1) * sizeof *r->spans);
  if (!r->spans) abort();
  r->spans[r->nspans++] = (Span){r->text.n, r->text.n};
}

static void span_close(Render *r) {
  r->spans[r->nspans - 1].b = r->text.n;
}

/* Python's str.strip(): White_Space and the separators U+001C..U+001F. */
static void strip(const char **s, size_t *n) {
  const char *p = *s, *e = *s + *n;
  while (p < e) {
    uint32_t uc;
    int k = tk_utf8(p, (size_t)(e - p), &uc);
    if (!(tk_is_space(uc) || (uc >= 0x1C && uc <= 0x1F))) break;
    p += k;
  }
  while (e > p) {
    const char *q = e - 1;
    while (q > p && ((unsigned char)*q & 0xC0) == 0x80) q--;
    uint32_t uc;
    tk_utf8(q, (size_t)(e - q), &uc);
    if (!(tk_is_space(uc) || (uc >= 0x1C && uc <= 0x1F))) break;
    e = q;
  }
  *s = p, *n = (size_t)(e - p);
}

static bool alternating(const MmrtTokMsg *m, size_t n, size_t from, const char *fam, char *err,
                        size_t errlen) {
  for (size_t i = from; i < n; i++) {
    const char *want = (i - from) % 2 == 0 ? "user" : "assistant";
    if (strcmp(m[i].role, want) != 0) {
      snprintf(err, errlen,
               "messages[%zu]: role '%s' where %s expects '%s' (user and assistant alternate, "
               "from a user message%s)",
               i, m[i].role, fam, want, from ? " after the system one" : "");
      return false;
    }
  }
  return true;
}

static bool render(int fam, const MmrtTokMsg *m, size_t n, Render *r, char *err, size_t errlen) {
  for (size_t i = 0; i < n; i++) {
    if (!m[i].role || !m[i].content) {
      snprintf(err, errlen, "messages[%zu]: no role or content", i);
      return false;
    }
    if (u8_check((const uint8_t *)m[i].content, m[i].content_len)) {
      snprintf(err, errlen, "messages[%zu]: content is not valid UTF-8", i);
      return false;
    }
  }
  if (fam == F_CHATML || fam == F_QWEN2) {
    if (fam == F_QWEN2 && n > 0 && strcmp(m[0].role, "system") != 0)
      put(r, "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n");
    for (size_t i = 0; i < n; i++) {
      bool asst = strcmp(m[i].role, "assistant") == 0;
      put(r, "<|im_start|>"), put(r, m[i].role), put(r, "\n");
      if (asst) span_open(r);
      tk_buf_put(&r->text, m[i].content, m[i].content_len);
      put(r, "<|im_end|>");
      if (asst) span_close(r);
      put(r, "\n");
    }
    return true;
  }
  if (fam == F_INTERNVL2) {
    bool sys = n > 0 && strcmp(m[0].role, "system") == 0;
    put(r, "<|im_start|>system\n");
    if (sys)
      tk_buf_put(&r->text, m[0].content, m[0].content_len);
    else
      put(r, "你是由上海人工智能实验室联合商汤科技开发的书生多模态大模型，英文名叫InternVL, "
             "是一个有用无害的人工智能助手。");
    put(r, "<|im_end|>");
    for (size_t i = sys; i < n; i++) {
      bool asst = strcmp(m[i].role, "assistant") == 0;
      put(r, "<|im_start|>"), put(r, m[i].role), put(r, "\n");
      if (asst) span_open(r);
      tk_buf_put(&r->text, m[i].content, m[i].content_len);
      put(r, "<|im_end|>");
      if (asst) span_close(r);
    }
    return true;
  }
  bool sys = n > 0 && strcmp(m[0].role, "system") == 0;
  size_t from = sys ? 1 : 0;
  if (!alternating(m, n, from, families[fam], err, errlen)) return false;
  if (fam == F_LLAMA2) {
    for (size_t i = from; i < n; i++) {
      const char *c = m[i].content;
      size_t cn = m[i].content_len;
      if ((i - from) % 2 == 0) {
        TkBuf u = {0};
        if (i == from && sys) {
          tk_buf_put(&u, "<<SYS>>\n", 8);
          tk_buf_put(&u, m[0].content, m[0].content_len);
          tk_buf_put(&u, "\n<</SYS>>\n\n", 11);
        }
        tk_buf_put(&u, c, cn);
        const char *s = u.p ? u.p : "";
        size_t sn = u.n;
        strip(&s, &sn);
        put(r, "<s>[INST] ");
        tk_buf_put(&r->text, s, sn);
        put(r, " [/INST]");
        free(u.p);
      } else {
        strip(&c, &cn);
        span_open(r);
        put(r, " ");
        tk_buf_put(&r->text, c, cn);
        put(r, " </s>");
        span_close(r);
      }
    }
    return true;
  }
  /* vicuna_v1: system + sep, then ROLE ": " MESSAGE seps[i % 2] */
  if (sys)
    tk_buf_put(&r->text, m[0].content, m[0].content_len);
  else
    put(r, "A chat between a curious user and an artificial intelligence assistant. The "
           "assistant gives helpful, detailed, and polite answers to the user's questions.");
  put(r, " ");
  for (size_t i = from; i < n; i++) {
    bool asst = (i - from) % 2 == 1;
    put(r, asst ? "ASSISTANT:" : "USER:");
    if (asst) span_open(r);
    put(r, " ");
    tk_buf_put(&r->text, m[i].content, m[i].content_len);
    put(r, asst ? "</s>" : " ");
    if (asst) span_close(r);
  }
  return true;
}

static int family_of(const char *name, char *err, size_t errlen) {
  for (int i = 0; families[i]; i++)
    if (strcmp(name, families[i]) == 0) return i;
  snprintf(err, errlen, "chat format '%s' is not known (known: %s)", name,
           mmrt_tok_chat_families());
  return -1;
}

bool mmrt_tok_chat_render(const char *family, const MmrtTokMsg *msgs, size_t n, MmrtTokText *out,
                          char *err, size_t errlen) {
  int fam = family_of(family, err, errlen);
  if (fam < 0) return false;
  Render r = {{out->p, out->n, out->cap}, NULL, 0};
  bool ok = render(fam, msgs, n, &r, err, errlen);
  out->p = r.text.p, out->n = r.text.n, out->cap = r.text.cap;
  free(r.spans);
  return ok;
}

/* The tokens of `full` wholly before byte `at` of the text, and whether the
 * next one holds bytes on both sides of it. */
static bool tokens_before(MmrtTok *t, const char *text, size_t at, int32_t bos,
                          const MmrtTokIds *full, size_t *k, bool *across, char *err,
                          size_t errlen) {
  MmrtTokIds pre = {0};
  if (bos >= 0) tk_ids_push(&pre, bos);
  bool ok = mmrt_tok_encode(t, text, at, false, &pre, err, errlen);
  size_t i = 0;
  while (ok && i < pre.n && i < full->n && pre.v[i] == full->v[i]) i++;
  *k = i, *across = ok && pre.n > i;
  free(pre.v);
  return ok;
}

bool mmrt_tok_chat_encode(MmrtTok *t, const char *family, const MmrtTokMsg *msgs, size_t n,
                          MmrtTokIds *ids, MmrtTokMask *mask, char *err, size_t errlen) {
  int fam = family_of(family, err, errlen);
  if (fam < 0) return false;
  static const char *const chatml[] = {"<|im_start|>", "<|im_end|>", NULL};
  static const char *const llama[] = {"<s>", "</s>", NULL};
  const char *const *need = fam <= F_INTERNVL2 ? chatml : llama;
  int32_t bos = -1;
  for (size_t i = 0; need[i]; i++) {
    int32_t id;
    if (!tk_added_id(t, need[i], strlen(need[i]), &id)) {
      snprintf(err, errlen, "chat format %s needs '%s' as an added token of the tokenizer", family,
               need[i]);
      return false;
    }
    if (i == 0 && fam == F_VICUNA) bos = id;
  }
  Render r = {{0}, NULL, 0};
  MmrtTokIds full = {0};
  bool ok = render(fam, msgs, n, &r, err, errlen);
  tk_buf_put(&r.text, "", 0);
  if (bos >= 0) tk_ids_push(&full, bos);
  ok = ok && mmrt_tok_encode(t, r.text.p, r.text.n, false, &full, err, errlen);
  uint8_t *m = calloc(full.n + 1, 1);
  for (size_t s = 0; ok && s < r.nspans; s++) {
    size_t lo, hi;
    bool across;
    ok = tokens_before(t, r.text.p, r.spans[s].a, bos, &full, &lo, &across, err, errlen) &&
         tokens_before(t, r.text.p, r.spans[s].b, bos, &full, &hi, &across, err, errlen);
    if (across) hi++; /* the token across the end holds span bytes */
    for (size_t i = lo; ok && i < hi && i < full.n; i++) m[i] = 1;
  }
  if (ok) {
    for (size_t i = 0; i < full.n; i++) {
      tk_ids_push(ids, full.v[i]);
      if (mask->n == mask->cap) {
        mask->cap = mask->cap ? mask->cap * 2 : 256;
        mask->v = realloc(mask->v, mask->cap);
        if (!mask->v) abort();
      }
      mask->v[mask->n++] = m[i];
    }
  }
  free(m), free(full.v), free(r.text.p), free(r.spans);
  return ok;
}
