/* mmc_data_conv.c: `mmc data conv FILE`: a LLaVA/InternVL conversation
 * dataset read as the trainer will read it (runtime/data/mmrt_conv.c), one
 * JSON line a sample on stdout:
 *   {"sample": I, "id": "ID", "tiles": [..], "image_tokens": [..],
 *    "truncated": false, "ids": [..], "mask": "0011.."}
 * mask: 1 where the id is a label (the assistant's replies), 0 where the
 * label is -100. Image sizes are decoded here with libpng, libjpeg and
 * libwebp (mmrt_image, linked into mmc; FFmpeg is not: it stays in
 * mmc-media): a full decode, since a truncated file must be found bad and
 * the tiling is of the EXIF-rotated size. The lines are kept until the end
 * and printed only when no sample failed (--bad-samples fail). */
#include <errno.h>
#include <json-c/json.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mmc_cli.h"
#include "mmrt_conv.h"
#include "mmrt_tok.h"
#include "tools/mmc_data.h"

static int bad(const char *args, const char *help, const char *fmt, const char *arg) {
  mmc_cli_refuse("data: conv: ", fmt, arg);
  return mmc_data_usage(stderr, args, help, 2);
}

static bool count(const char *v, int lo, int hi, int *out) {
  char *end;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (errno || *end || end == v || x < lo || x > hi) return false;
  *out = (int)x;
  return true;
}

int mmc_data_conv(int argc, char **argv, const char *args, const char *help) {
  const char *file = NULL, *tokp = NULL;
  MmrtConvOpts o = {.too_long = MMRT_CONV_FAIL};
  bool tiles = false, skip = false;
  int seq = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) return mmc_data_usage(stdout, args, help, 0);
    static const char *const takes[] = {
        "--tokenizer",       "--chat",    "--images",   "--image-tokens", "--tile", "--max-tiles",
        "--tokens-per-tile", "--seq-len", "--too-long", "--bad-samples",  NULL};
    const char *v = NULL;
    for (int k = 0; takes[k]; k++)
      if (!strcmp(a, takes[k])) {
        if (i + 1 >= argc) return bad(args, help, "option '%s' needs a value", a);
        v = argv[++i];
      }
    if (!strcmp(a, "--tokenizer"))
      tokp = v;
    else if (!strcmp(a, "--chat"))
      o.family = v;
    else if (!strcmp(a, "--images"))
      o.image_dir = v;
    else if (!strcmp(a, "--image-tokens")) {
      if (!count(v, 1, 1 << 20, &o.image_tokens))
        return bad(args, help, "--image-tokens takes a count from 1 to 1048576, not '%s'", v);
    } else if (!strcmp(a, "--tile")) {
      if (!count(v, 1, 1 << 14, &o.tile))
        return bad(args, help, "--tile takes a size in pixels from 1 to 16384, not '%s'", v);
    } else if (!strcmp(a, "--max-tiles")) {
      if (!count(v, 1, 64, &o.max_tiles))
        return bad(args, help, "--max-tiles takes a count from 1 to 64, not '%s'", v);
    } else if (!strcmp(a, "--tokens-per-tile")) {
      if (!count(v, 1, 1 << 16, &o.tokens_per_tile))
        return bad(args, help, "--tokens-per-tile takes a count from 1 to 65536, not '%s'", v);
    } else if (!strcmp(a, "--seq-len")) {
      if (!count(v, 1, 1 << 30, &seq))
        return bad(args, help, "--seq-len takes a token count from 1, not '%s'", v);
    } else if (!strcmp(a, "--too-long")) {
      if (!strcmp(v, "fail"))
        o.too_long = MMRT_CONV_FAIL;
      else if (!strcmp(v, "truncate"))
        o.too_long = MMRT_CONV_TRUNCATE;
      else if (!strcmp(v, "drop"))
        o.too_long = MMRT_CONV_DROP;
      else
        return bad(args, help, "--too-long takes fail, truncate or drop, not '%s'", v);
    } else if (!strcmp(a, "--bad-samples")) {
      if (strcmp(v, "fail") && strcmp(v, "skip"))
        return bad(args, help, "--bad-samples takes fail or skip, not '%s'", v);
      skip = !strcmp(v, "skip");
    } else if (!strcmp(a, "--tiles-from-images"))
      tiles = true;
    else if (a[0] == '-' && a[1])
      return bad(args, help, "unknown option '%s'", a);
    else if (!file)
      file = a;
    else
      return bad(args, help, "unexpected argument '%s'", a);
  }
  if (!file) return bad(args, help, "conv needs a dataset FILE (JSON or JSONL)%s", "");
  if (!tokp) return bad(args, help, "conv needs --tokenizer FILE.json%s", "");
  if (!o.family) return bad(args, help, "conv needs --chat FAMILY (%s)", mmrt_tok_chat_families());
  if (tiles == (o.image_tokens > 0))
    return bad(args, help,
               "give either --image-tokens N or --tiles-from-images (with --tile, --max-tiles, "
               "--tokens-per-tile)%s",
               "");
  if (!tiles && (o.tile || o.max_tiles || o.tokens_per_tile))
    return bad(args, help,
               "--tile, --max-tiles and --tokens-per-tile go with --tiles-from-images%s", "");
  if (tiles) {
    if (!o.tile) o.tile = 448;
    if (!o.max_tiles) o.max_tiles = 12;
    if (!o.tokens_per_tile) o.tokens_per_tile = 256;
  }
  o.seq_len = (size_t)seq;
  char err[2048];
  MmrtTok *tok = mmrt_tok_load(tokp, err, sizeof err);
  if (!tok) {
    fprintf(stderr, "mmc: error: %s\n", err);
    return 1;
  }
  MmrtConv *c = mmrt_conv_open(file, tok, &o, err, sizeof err);
  if (!c) {
    fprintf(stderr, "mmc: error: %s\n", err);
    mmrt_tok_free(tok);
    return 1;
  }
  char *out = NULL;
  size_t outn = 0;
  FILE *m = open_memstream(&out, &outn);
  if (!m) abort();
  size_t ok = 0, nbad = 0, ndrop = 0, nimg = 0, ntok = 0, nlab = 0, ntrunc = 0;
  int rc = 0;
  for (;;) {
    MmrtConvSample s;
    MmrtConvStatus st = mmrt_conv_next(c, &s, err, sizeof err);
    if (st == MMRT_CONV_EOF) break;
    if (st == MMRT_CONV_ERROR || (st == MMRT_CONV_BAD && !skip)) {
      fprintf(stderr, "mmc: error: %s\n", err);
      rc = 1;
      break;
    }
    if (st != MMRT_CONV_OK) {
      fprintf(stderr, "mmc: data: conv: %s%s\n", err, st == MMRT_CONV_BAD ? " (skipped)" : "");
      *(st == MMRT_CONV_BAD ? &nbad : &ndrop) += 1;
      continue;
    }
    json_object *jid = json_object_new_string(s.id);
    fprintf(m, "{\"sample\": %zu, \"id\": %s, \"tiles\": [", s.index,
            json_object_to_json_string_ext(jid, JSON_C_TO_STRING_PLAIN));
    json_object_put(jid);
    for (int i = 0; i < s.nimages; i++) fprintf(m, "%s%d", i ? ", " : "", s.tiles[i]);
    fprintf(m, "], \"image_tokens\": [");
    for (int i = 0; i < s.nimages; i++) fprintf(m, "%s%d", i ? ", " : "", s.image_tokens[i]);
    fprintf(m, "], \"truncated\": %s, \"ids\": [", s.truncated ? "true" : "false");
    for (size_t i = 0; i < s.ids.n; i++) fprintf(m, "%s%d", i ? ", " : "", (int)s.ids.v[i]);
    fprintf(m, "], \"mask\": \"");
    for (size_t i = 0; i < s.mask.n; i++) fputc('0' + s.mask.v[i], m), nlab += s.mask.v[i];
    fprintf(m, "\"}\n");
    ok++, nimg += (size_t)s.nimages, ntok += s.ids.n, ntrunc += s.truncated;
    mmrt_conv_sample_free(&s);
  }
  fclose(m);
  if (rc == 0) {
    fwrite(out, 1, outn, stdout);
    fflush(stdout);
    fprintf(stderr,
            "mmc: data: conv: %zu samples, %zu images, %zu tokens, %zu labels; %zu truncated, "
            "%zu too long dropped, %zu bad skipped\n",
            ok, nimg, ntok, nlab, ntrunc, ndrop, nbad);
  }
  free(out);
  mmrt_conv_close(c);
  mmrt_tok_free(tok);
  return rc;
}
