/* mmc_tokenize.c: `mmc tokenize TOKENIZER.json [FILE]`, the driver's
 * command over runtime/mmrt_tok.h. Encoding: each input line (without its
 * '\n'; a '\r' stays part of the text) becomes one line of space-separated
 * ids, truncated and padded as the file says (tokenizers' encode) unless
 * --no-truncation / --no-padding. Decoding (--decode): each line of ids becomes one line of text.
 * Input that is not UTF-8 stops the run at that line with exit 1 (the lines
 * before it were written); so do a bad id and a bad or unsupported
 * tokenizer.json (nothing written). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/mmrt_tok.h"
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
          "  -h, --help         this help\n",
          args, help);
  return rc;
}

static int bad(const char *args, const char *help, const char *fmt, const char *arg) {
  fprintf(stderr, "mmc: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n");
  return usage(stderr, args, help, 2);
}

int mmc_tokenize(int argc, char **argv, const char *args, const char *help) {
  const char *tok_path = NULL, *in_path = NULL;
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
    else if (a[0] == '-' && a[1])
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
  while (rc == 0 && (n = getline(&line, &cap, in)) >= 0) {
    lineno++;
    size_t len = (size_t)n;
    if (len && line[len - 1] == '\n') len--;
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
  free(line), free(ids.v), free(text.p);
  if (in != stdin) fclose(in);
  mmrt_tok_free(t);
  return rc;
}
