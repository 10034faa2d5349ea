/* mmc_tokenize.c: `mmc tokenize TOKENIZER.json [FILE]`, the driver's
 * command over runtime/data/mmrt_tok.h. Encoding: each input line (without its
 * '\n'; a '\r' stays part of the text) becomes one line of space-separated
 * ids, truncated and padded as the file says (tokenizers' encode) unless
 * --no-truncation / --no-padding. Decoding (--decode): each line of ids becomes one line of text.
 * Input that is not UTF-8 stops the run at that line with exit 1 (the lines
 * before it were written); so do a bad id and a bad or unsupported
 * tokenizer.json (nothing written). */
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mmc_cli.h"
#include "mmrt_tok.h"
#include "tools/mmc_tokenize.h"

static int usage(FILE *out, const char *args, const char *help, int rc) {
  fprintf(out,
          "usage: mmc tokenize %s\n\n%s\n\nOptions:\n"
          "  --decode           read lines of ids, write their text\n"
          "  --add-special      encoding: add the post-processor's special tokens (BOS/EOS)\n"
          "  --skip-special     decoding: leave out special added tokens\n"
          "  --no-truncation    encoding: ignore the file's truncation (applied by default,\n"
          "                     as tokenizers' encode does)\n"
          "  --no-padding       encoding: ignore the file's padding (applied by default)\n"
          "  --chat FAMILY      read JSONL lines of {\"messages\": [{\"role\", \"content\"}...]};\n"
          "                     write per line the ids of FAMILY's chat template and a line\n"
          "                     of 0/1, 1 on the assistant tokens (the loss mask). FAMILY:\n"
          "                     chatml, qwen2, internvl2, llama2, vicuna\n"
          "  -h, --help         this help\n",
          args, help);
  return rc;
}

static int bad(const char *args, const char *help, const char *fmt, const char *arg) {
  mmc_cli_refuse("", fmt, arg);
  return usage(stderr, args, help, 2);
}

/* One JSONL line of --chat: its ids and mask written, or a message. */
static bool chat_line(MmrtTok *t, const char *family, const char *line, size_t len, MmrtTokIds *ids,
                      MmrtTokMask *mask, char *err, size_t errlen) {
  json_tokener *tok = json_tokener_new();
  json_object *o = json_tokener_parse_ex(tok, line, (int)len), *msgs;
  bool parsed = o && json_tokener_get_error(tok) == json_tokener_success &&
                json_tokener_get_parse_end(tok) == len;
  json_tokener_free(tok);
  if (!parsed || !json_object_is_type(o, json_type_object)) {
    snprintf(err, errlen, "not a JSON object on one line");
    json_object_put(o);
    return false;
  }
  if (!json_object_object_get_ex(o, "messages", &msgs) ||
      !json_object_is_type(msgs, json_type_array)) {
    snprintf(err, errlen, "no \"messages\" array");
    json_object_put(o);
    return false;
  }
  size_t n = json_object_array_length(msgs);
  MmrtTokMsg *m = calloc(n + 1, sizeof *m);
  bool ok = true;
  for (size_t i = 0; ok && i < n; i++) {
    json_object *e = json_object_array_get_idx(msgs, i), *role, *content;
    if (!json_object_is_type(e, json_type_object) || !json_object_object_get_ex(e, "role", &role) ||
        !json_object_is_type(role, json_type_string) ||
        !json_object_object_get_ex(e, "content", &content) ||
        !json_object_is_type(content, json_type_string)) {
      snprintf(err, errlen, "messages[%zu] is not {\"role\": string, \"content\": string}", i);
      ok = false;
      break;
    }
    m[i] = (MmrtTokMsg){json_object_get_string(role), json_object_get_string(content),
                        (size_t)json_object_get_string_len(content)};
  }
  ok = ok && mmrt_tok_chat_encode(t, family, m, n, ids, mask, err, errlen);
  free(m);
  json_object_put(o);
  return ok;
}

int mmc_tokenize(int argc, char **argv, const char *args, const char *help) {
  const char *tok_path = NULL, *in_path = NULL, *chat = NULL;
  bool decode = false, add_special = false, skip_special = false, no_trunc = false, no_pad = false;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) return usage(stdout, args, help, 0);
    if (strcmp(a, "--decode") == 0)
      decode = true;
    else if (strcmp(a, "--add-special") == 0)
      add_special = true;
    else if (strcmp(a, "--skip-special") == 0)
      skip_special = true;
    else if (strcmp(a, "--no-truncation") == 0)
      no_trunc = true;
    else if (strcmp(a, "--no-padding") == 0)
      no_pad = true;
    else if (strcmp(a, "--chat") == 0) {
      if (i + 1 >= argc) return bad(args, help, "--chat needs a FAMILY%s", "");
      chat = argv[++i];
    } else if (a[0] == '-' && a[1])
      return bad(args, help, "unknown option '%s'", a);
    else if (!tok_path)
      tok_path = a;
    else if (!in_path)
      in_path = a;
    else
      return bad(args, help, "unexpected argument '%s' (one tokenizer and one input file)", a);
  }
  if (!tok_path) return bad(args, help, "no tokenizer.json given%s", "");
  if (decode && add_special)
    return bad(args, help, "--add-special goes with encoding, not with --decode%s", "");
  if (!decode && skip_special) return bad(args, help, "--skip-special goes with --decode%s", "");
  if (decode && (no_trunc || no_pad))
    return bad(args, help, "%s goes with encoding, not with --decode",
               no_trunc ? "--no-truncation" : "--no-padding");
  if (chat && (decode || add_special || no_trunc || no_pad))
    return bad(args, help, "--chat goes alone (its template places the special tokens; %s)",
               "no truncation or padding");
  if (chat) { /* the family, before reading anything */
    MmrtTokText none = {0};
    char e[256];
    bool known = mmrt_tok_chat_render(chat, NULL, 0, &none, e, sizeof e);
    free(none.p);
    if (!known) return bad(args, help, "--chat: %s", e);
  }
  unsigned flags = (add_special ? MMRT_TOK_ADD_SPECIAL : 0) | (no_trunc ? 0 : MMRT_TOK_TRUNCATE) |
                   (no_pad ? 0 : MMRT_TOK_PAD);
  char err[1024];
  MmrtTok *t = mmrt_tok_load(tok_path, err, sizeof err);
  if (!t) {
    fprintf(stderr, "mmc: error: %s\n", err);
    return 1;
  }
  FILE *in = in_path && strcmp(in_path, "-") != 0 ? fopen(in_path, "rb") : stdin;
  const char *name = in == stdin ? "<stdin>" : in_path;
  if (!in) {
    fprintf(stderr, "mmc: error: %s: cannot open the file\n", in_path);
    mmrt_tok_free(t);
    return 1;
  }
  char *line = NULL;
  size_t cap = 0, lineno = 0;
  ssize_t n;
  int rc = 0;
  MmrtTokIds ids = {0};
  MmrtTokText text = {0};
  MmrtTokMask mask = {0};
  while (rc == 0 && (n = getline(&line, &cap, in)) >= 0) {
    lineno++;
    size_t len = (size_t)n;
    if (len && line[len - 1] == '\n') len--;
    if (chat) {
      ids.n = mask.n = 0;
      if (!chat_line(t, chat, line, len, &ids, &mask, err, sizeof err)) {
        fprintf(stderr, "mmc: error: %s:%zu: %s\n", name, lineno, err);
        rc = 1;
        break;
      }
      for (size_t i = 0; i < ids.n; i++) printf(i ? " %d" : "%d", (int)ids.v[i]);
      putchar('\n');
      for (size_t i = 0; i < mask.n; i++) printf(i ? " %d" : "%d", mask.v[i]);
      putchar('\n');
      continue;
    }
    if (!decode) {
      ids.n = 0;
      if (!mmrt_tok_encode_opts(t, line, len, flags, &ids, err, sizeof err)) {
        fprintf(stderr, "mmc: error: %s:%zu: %s\n", name, lineno, err);
        rc = 1;
        break;
      }
      for (size_t i = 0; i < ids.n; i++) printf(i ? " %d" : "%d", (int)ids.v[i]);
      putchar('\n');
      continue;
    }
    ids.n = 0;
    line[len] = 0;
    for (char *p = line;;) {
      while (*p == ' ' || *p == '\t' || *p == '\r') p++;
      if (!*p) break;
      char *end;
      long v = strtol(p, &end, 10);
      if (end == p || (*end && *end != ' ' && *end != '\t' && *end != '\r') || v < 0 ||
          v > INT32_MAX) {
        int w = 0;
        while (p[w] && p[w] != ' ' && p[w] != '\t') w++;
        fprintf(stderr, "mmc: error: %s:%zu:%zu: '%.*s' is not a token id (a whole number >= 0)\n",
                name, lineno, (size_t)(p - line) + 1, w, p);
        rc = 1;
        break;
      }
      MmrtTokIds one = ids;
      if (ids.n == ids.cap) {
        one.cap = ids.cap ? ids.cap * 2 : 64;
        one.v = realloc(ids.v, one.cap * sizeof *one.v);
        if (!one.v) abort();
      }
      ids = one;
      ids.v[ids.n++] = (int32_t)v;
      p = end;
    }
    if (rc) break;
    text.n = 0;
    if (!mmrt_tok_decode(t, ids.v, ids.n, skip_special, &text, err, sizeof err)) {
      fprintf(stderr, "mmc: error: %s:%zu: %s\n", name, lineno, err);
      rc = 1;
      break;
    }
    fwrite(text.p, 1, text.n, stdout);
    putchar('\n');
  }
  if (rc == 0 && ferror(in)) {
    fprintf(stderr, "mmc: error: %s: read error\n", name);
    rc = 1;
  }
  if (fflush(stdout) != 0) {
    fprintf(stderr, "mmc: error: cannot write the output\n");
    rc = 1;
  }
  free(line), free(ids.v), free(text.p), free(mask.v);
  if (in != stdin) fclose(in);
  mmrt_tok_free(t);
  return rc;
}
