/* mmc_import.c: `mmc import HF_DIR [-o FILE.mm]` writes a readable .mm file
 * that imports the stdlib module of the checkpoint's architecture and
 * declares it with config.json's hyper-parameters (runtime/io/mmrt_hf_map.def;
 * a config key that changes the math and that mmc does not support is
 * refused by name), and checks the checkpoint's tensor headers against the
 * parameters of the model it wrote (mmc_import_verify, also behind `mmc
 * check FILE.mm --init-from HF_DIR`). */
#include "mmc_import.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mmrt_hf.h"

#define ERRLEN 1024

int mmc_import_write(const char *dir, const char *out, char *model, size_t len) {
  char err[ERRLEN];
  MmrtHf *h;
  if (mmrt_hf_open(&h, dir, err, sizeof err) != MMRT_OK) {
    fprintf(stderr, "mmc: import: %s\n", err);
    return 1;
  }
  snprintf(model, len, "%s", mmrt_hf_model(h));
  const char *base = out ? strrchr(out, '/') : NULL;
  base = base ? base + 1 : out;
  if (base && strcmp(base, mmrt_hf_stdlib(h)) == 0) {
    fprintf(stderr,
            "mmc: import: -o %s: the file would import itself (it imports the stdlib's %s); choose "
            "another name\n",
            out, mmrt_hf_stdlib(h));
    mmrt_hf_close(h);
    return 1;
  }
  /* the text first: nothing is written on an error */
  size_t cap = 8192, n = 0;
  char *s = malloc(cap);
  if (!s) return mmrt_hf_close(h), fprintf(stderr, "mmc: out of memory\n"), 1;
#define PUT(...) n += (size_t)snprintf(s + n, n < cap ? cap - n : 0, __VA_ARGS__)
  const char *inst = mmrt_hf_instance(h), *mod = mmrt_hf_module(h);
  int64_t maxpos = 0, T = 128;
  if (mmrt_hf_config_int(h, "n_positions", &maxpos) && maxpos < T) T = maxpos;
  PUT("// %s, imported by `mmc import %s` (%s, %d tensors).\n", mmrt_hf_model(h), dir,
      mmrt_hf_arch(h), mmrt_hf_ntensors(h));
  PUT("// Load its weights with `--init-from %s`; add train / parallel sections, or\n", dir);
  PUT("// `model Mine extends %s { ... }`.\n", mmrt_hf_model(h));
  int vision = strcmp(mod, "CLIPVision") == 0, nparts = mmrt_hf_nparts(h);
  int64_t side = 0, patch = 1; /* a composed model's text: 128 tokens after the image's */
  for (int i = 0; nparts && i < mmrt_hf_part_nhparams(h, 1); i++) {
    const char *v, *nm = mmrt_hf_part_hparam(h, 1, i, &v);
    if (!strcmp(nm, "image")) side = atoll(v);
    if (!strcmp(nm, "patch") && atoll(v) > 0) patch = atoll(v);
  }
  /* InternVL: the projector pixel-shuffles the tower's grid 2x2 into one token */
  int ivl = strcmp(mod, "PixelShuffleMLP") == 0;
  int64_t grid = patch > 0 ? side / patch : 0;
  T += ivl ? (grid / 2) * (grid / 2) : grid * grid;
  for (int k = 1; k <= nparts; k++) {
    const char *file, *m;
    mmrt_hf_part(h, k, &file, &m);
    PUT("import \"%s\"\n", file);
  }
  PUT("import \"%s\"\n\nmodel %s {\n  let B = 1\n", mmrt_hf_stdlib(h), mmrt_hf_model(h));
  if (!vision) PUT("  let T = %lld\n", (long long)T);
  /* the parts of a composed model, then its own module (a composed model's: the projector) */
  for (int q = 1; q <= nparts + 1; q++) {
    int k = q % (nparts + 1);
    const char *file, *m = mod, *in = k ? mmrt_hf_part(h, k, &file, &m) : inst;
    PUT("  %s = %s(", *in ? in : "projector", m);
    for (int i = 0; i < mmrt_hf_part_nhparams(h, k); i++) {
      const char *v, *nm = mmrt_hf_part_hparam(h, k, i, &v);
      PUT("%s%s = %s", i ? (i % 5 == 0 ? ",\n      " : ", ") : "", nm, v);
    }
    if (k == 0 && ivl) PUT(", grid = %lld", (long long)grid);
    PUT(")\n");
  }
  PUT("\n");
  if (ivl) {
    /* InternVL: the tower's last hidden state without the class token, pixel-shuffled and
       projected, placed at the image-context tokens of the text */
    int64_t ch = 3, tok = -1, force = 0;
    for (int i = 0; i < mmrt_hf_part_nhparams(h, 1); i++) {
      const char *v, *nm = mmrt_hf_part_hparam(h, 1, i, &v);
      if (!strcmp(nm, "channels")) ch = atoll(v);
    }
    const char *why = NULL;
    if (!strcmp(mmrt_hf_arch(h), "InternVLChatModel")) {
      /* the remote code's img_context_token_id: the tokenizer's <IMG_CONTEXT> */
      if (mmrt_hf_added_token(h, "<IMG_CONTEXT>", &tok, err, sizeof err) != MMRT_OK) why = err;
      if (mmrt_hf_config_int(h, "force_image_size", &force) && force != side) {
        snprintf(err, sizeof err,
                 "%s/config.json: force_image_size %lld differs from vision_config.image_size "
                 "%lld (mmc does not interpolate the position table)",
                 dir, (long long)force, (long long)side);
        why = err;
      }
    } else if (!mmrt_hf_config_int(h, "image_token_id", &tok)) {
      snprintf(err, sizeof err, "%s/config.json: no image_token_id", dir);
      why = err;
    }
    if (!why && (grid % 2 || grid < 2)) {
      snprintf(err, sizeof err,
               "%s/config.json: the tower's grid (%lld patches a side) does not halve", dir,
               (long long)grid);
      why = err;
    }
    if (why) {
      free(s);
      mmrt_hf_close(h);
      fprintf(stderr, "mmc: import: %s\n", why);
      return 1;
    }
    PUT("  let IMG = %lld // the image-context token: the text's tokens the image takes the place "
        "of\n",
        (long long)tok);
    PUT("  // the tower's last hidden state without the class token, its %lld x %lld grid\n"
        "  // pixel-shuffled into %lld tokens, projected into the text at the IMG tokens;\n"
        "  // labels: the text shifted by one (-100: not scored)\n",
        (long long)grid, (long long)grid, (long long)((grid / 2) * (grid / 2)));
    PUT("  forward(pixels: f32[B, %lld, %lld, %lld], text: i32[B, T], labels: i32[B, T]) -> loss "
        "{\n",
        (long long)ch, (long long)side, (long long)side);
    PUT("    image  = projector(vision(pixels)[:, 1:])\n");
    PUT("    logits = llm.decode(place(llm.embed(text), image, text, token = IMG))\n");
    PUT("    return cross_entropy(logits, labels, ignore = -100)\n  }\n}\n");
  } else if (nparts) {
    /* LLaVA: the tower's hidden state after `used` of its layers, the class token dropped
       ("default"), projected and placed at the image tokens of the text */
    int64_t depth = 0, feat = -2, ch = 3, size = 224, tok = 32000;
    for (int i = 0; i < mmrt_hf_part_nhparams(h, 1); i++) {
      const char *v, *nm = mmrt_hf_part_hparam(h, 1, i, &v);
      if (!strcmp(nm, "depth")) depth = atoll(v);
      if (!strcmp(nm, "channels")) ch = atoll(v);
      if (!strcmp(nm, "image")) size = atoll(v);
    }
    mmrt_hf_config_int(h, "vision_feature_layer", &feat);
    mmrt_hf_config_int(h, "image_token_index", &tok);
    int64_t used = feat < 0 ? depth + 1 + feat : feat;
    if (used < 1 || used > depth) {
      free(s);
      mmrt_hf_close(h);
      fprintf(stderr,
              "mmc: import: %s/config.json: vision_feature_layer %lld: mmc takes the output of "
              "one of the tower's %lld layers (1 .. %lld, or -1 .. -%lld)\n",
              dir, (long long)feat, (long long)depth, (long long)depth, (long long)depth);
      return 1;
    }
    PUT("  let IMG = %lld // image_token_index: the text's tokens the image takes the place of\n",
        (long long)tok);
    PUT("  // the tower's hidden state after %lld of its %lld layers (vision_feature_layer = "
        "%lld)\n  // without the class token, projected into the text at the IMG tokens; "
        "labels: the\n  // text shifted by one (-100: not scored)\n",
        (long long)used, (long long)depth, (long long)feat);
    PUT("  forward(pixels: f32[B, %lld, %lld, %lld], text: i32[B, T], labels: i32[B, T]) -> loss "
        "{\n",
        (long long)ch, (long long)size, (long long)size);
    PUT("    image  = projector(vision.layers[0:%lld](vision.embed(pixels))[:, 1:])\n",
        (long long)used);
    PUT("    logits = llm.decode(place(llm.embed(text), image, text, token = IMG))\n");
    PUT("    return cross_entropy(logits, labels, ignore = -100)\n  }\n}\n");
  } else if (strcmp(mod, "T5Encoder") == 0) {
    /* an encoder has no loss of its own: a stand-in objective through the tied embedding, so
       that the model compiles, loads and trains alone */
    PUT("  // a stand-in objective (the embedding as a tied head); compose the encoder into your "
        "model\n");
    PUT("  forward(ids: i32[B, T], labels: i32[B, T]) -> loss {\n");
    PUT("    return cross_entropy(linear(%s(ids), %s.shared.weight), labels, ignore = -100)\n",
        inst, inst);
    PUT("  }\n}\n");
  } else if (vision) {
    /* the same for a vision tower: the first `classes` features of the pooled output as the
       logits (no parameter outside the checkpoint) */
    int64_t img = 224, ch = 3;
    mmrt_hf_config_int(h, "image_size", &img);
    mmrt_hf_config_int(h, "num_channels", &ch);
    PUT("  let classes = 10\n");
    PUT("  // a stand-in objective (the first `classes` features of the pooled class token as\n"
        "  // logits); compose the tower into your model\n");
    PUT("  forward(pixels: f32[B, %lld, %lld, %lld], labels: i32[B]) -> loss {\n", (long long)ch,
        (long long)img, (long long)img);
    PUT("    return cross_entropy(%s.pooled(pixels)[:, 0:classes], labels)\n  }\n}\n", inst);
  } else {
    PUT("  // labels: the ids shifted by one (-100: not scored)\n");
    PUT("  forward(ids: i32[B, T], labels: i32[B, T]) -> loss { return %s(ids, labels) }\n}\n",
        inst);
  }
#undef PUT
  if (n >= cap) {
    free(s);
    mmrt_hf_close(h);
    fprintf(stderr, "mmc: import %s: the model text is too long\n", dir);
    return 1;
  }
  mmrt_hf_close(h);
  int rc = 0;
  if (!out) {
    fputs(s, stdout);
  } else if (mmrt_write_file_atomic(out, s, n, err, sizeof err) != MMRT_OK) {
    fprintf(stderr, "mmc: import: -o %s\n", err);
    rc = 1;
  }
  free(s);
  return rc;
}

int mmc_import_verify(const IrModule *m, const char *spec) {
  char err[ERRLEN], prefix[256] = "";
  const char *dir = spec, *eq = strchr(spec, '=');
  if (eq && !mmrt_hf_is_dir(spec)) {
    snprintf(prefix, sizeof prefix, "%.*s", (int)(eq - spec), spec);
    dir = eq + 1;
  }
  MmrtHf *h;
  if (mmrt_hf_open(&h, dir, err, sizeof err) != MMRT_OK) {
    fprintf(stderr, "mmc: --init-from %s\n", err);
    return 1;
  }
  if (!eq || dir == spec) snprintf(prefix, sizeof prefix, "%s", mmrt_hf_instance(h));
  int n = m->params.len;
  MmrtHfParam *p = calloc((size_t)n + 1, sizeof *p);
  MmrtHfSrc *src = calloc((size_t)n + 1, sizeof *src);
  int rc = p && src ? 0 : 1, used = 0;
  for (int i = 0; !rc && i < n; i++) {
    const IrValue *v = m->params.items[i];
    p[i].name = v->name;
    p[i].ndim = v->shape.rank;
    for (int d = 0; d < v->shape.rank; d++) p[i].shape[d] = v->shape.d[d];
    if (v->dtype != IR_F32) rc = 1, fprintf(stderr, "mmc: --init-from: %s is not f32\n", v->name);
  }
  if (!rc && mmrt_hf_match(h, prefix, p, n, src, err, sizeof err) != MMRT_OK) {
    fprintf(stderr, "mmc: --init-from %s\n", err);
    rc = 1;
  }
  for (int i = 0; !rc && i < n; i++) used += src[i].tensor >= 0;
  if (!rc) {
    fprintf(stderr, "mmc: %s (%s): %d tensors give %d of model %s's %d parameters", dir,
            mmrt_hf_arch(h), mmrt_hf_ntensors(h), used, m->name, n);
    if (used < n) {
      fprintf(stderr, "; left at their init (outside '%s'):", prefix);
      for (int i = 0; i < n; i++)
        if (src[i].tensor < 0) fprintf(stderr, " %s", p[i].name);
    }
    fprintf(stderr, "\n");
  }
  free(p);
  free(src);
  mmrt_hf_close(h);
  return rc;
}
