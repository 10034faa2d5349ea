/* mmrt_hf.c: Hugging Face model directories (mmrt_hf.h): config.json
 * checked against the mapping of runtime/io/mmrt_hf_map.def, safetensors
 * headers of one file or of an index's shards (read by mmrt_st_open), the
 * parameters matched to tensors, and tensors read as float32 slices. */
#include "mmrt_hf.h"

#include <dirent.h>
#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "mmrt_log.h"

/* ---- the mapping, from mmrt_hf_map.def ---- */

typedef enum HfFam {
#define HF_FAMILY(fam, file, mod, inst, model) fam,
#define HF_ARCH(a, fam)
#define HF_PART(fam, key, hfp, inst, sub)
#define HF_PART_IF(fam, key, hfp, inst, sub, type)
#define HF_HP(fam, name, kind, key, fb, def)
#define HF_CHECK(fam, key, want, absent)
#define HF_SAME(fam, key, num, den)
#define HF_KEY(fam, key)
#define HF_RULE(fam, hf, mmc, x, cond)
#include "mmrt_hf_map.def"
#undef HF_FAMILY
  HF_NFAM,
  HF_ANY /* a key known to every family */
} HfFam;

typedef enum HfKind { HF_INT, HF_FLOAT, HF_BOOL } HfKind;
typedef enum HfX { HF_NONE, HF_T, HF_SPLIT, HF_T_SPLIT, HF_TIE, HF_SKIP } HfX;

typedef struct Family {
  const char *file, *module, *instance, *model;
} Family;
static const Family families[] = {
#define HF_FAMILY(fam, file, mod, inst, model) [fam] = {file, mod, inst, model},
#include "mmrt_hf_map.def"
#undef HF_FAMILY
};

typedef struct Arch {
  const char *name;
  HfFam fam;
} Arch;
static const Arch archs[] = {
#define HF_FAMILY(fam, file, mod, inst, model)
#undef HF_ARCH
#define HF_ARCH(a, fam) {a, fam},
#include "mmrt_hf_map.def"
#undef HF_ARCH
#define HF_ARCH(a, fam)
};

typedef struct Part {
  HfFam fam;
  const char *key, *hfp, *inst;
  HfFam sub;
  const char *type; /* HF_PART_IF: the nested config's model_type it takes (NULL: any) */
} Part;
static const Part parts[] = {
#undef HF_PART
#undef HF_PART_IF
#define HF_PART(fam, key, hfp, inst, sub)          {fam, key, hfp, inst, sub, NULL},
#define HF_PART_IF(fam, key, hfp, inst, sub, type) {fam, key, hfp, inst, sub, type},
#include "mmrt_hf_map.def"
#undef HF_PART
#undef HF_PART_IF
#define HF_PART(fam, key, hfp, inst, sub)
#define HF_PART_IF(fam, key, hfp, inst, sub, type)
};

typedef struct Hp {
  HfFam fam;
  const char *name;
  HfKind kind;
  const char *key, *fallback, *def;
} Hp;
static const Hp hps[] = {
#undef HF_HP
#define HF_HP(fam, name, kind, key, fb, def) {fam, name, kind, key, fb, def},
#include "mmrt_hf_map.def"
#undef HF_HP
#define HF_HP(fam, name, kind, key, fb, def)
};

typedef struct Check {
  HfFam fam;
  const char *key, *want, *absent;
} Check;
static const Check checks[] = {
#undef HF_CHECK
#define HF_CHECK(fam, key, want, absent) {fam, key, want, absent},
#include "mmrt_hf_map.def"
#undef HF_CHECK
#define HF_CHECK(fam, key, want, absent)
};

typedef struct Same {
  HfFam fam;
  const char *key, *num, *den;
} Same;
static const Same sames[] = {
#undef HF_SAME
#define HF_SAME(fam, key, num, den) {fam, key, num, den},
#include "mmrt_hf_map.def"
#undef HF_SAME
#define HF_SAME(fam, key, num, den)
};

typedef struct Key {
  HfFam fam;
  const char *key;
} Key;
static const Key keys[] = {
#undef HF_KEY
#define HF_KEY(fam, key) {fam, key},
#include "mmrt_hf_map.def"
#undef HF_KEY
#define HF_KEY(fam, key)
    /* every family: what names the model, the tokenizer's ids, training-only settings */
    {HF_ANY, "architectures"},
    {HF_ANY, "model_type"},
    {HF_ANY, "torch_dtype"},
    {HF_ANY, "transformers_version"},
    {HF_ANY, "_name_or_path"},
    {HF_ANY, "bos_token_id"},
    {HF_ANY, "eos_token_id"},
    {HF_ANY, "pad_token_id"},
    {HF_ANY, "initializer_range"},
    {HF_ANY, "use_cache"},
    {HF_ANY, "tokenizer_class"},
    {HF_ANY, "task_specific_params"},
    {HF_ANY, "return_dict"},
    {HF_ANY, "output_attentions"},
    {HF_ANY, "output_hidden_states"},
    {HF_ANY, "id2label"},
    {HF_ANY, "label2id"},
    {HF_ANY, "gradient_checkpointing"},
    {HF_ANY, "output_past"}, /* mT5's published configs: a generation flag */
    /* what transformers writes into a composed model's nested configs: generation and
       bookkeeping settings of every PretrainedConfig, none read by these models' forward */
    {HF_ANY, "_attn_implementation_autoset"},
    {HF_ANY, "bad_words_ids"},
    {HF_ANY, "begin_suppress_tokens"},
    {HF_ANY, "chunk_size_feed_forward"},
    {HF_ANY, "decoder_start_token_id"},
    {HF_ANY, "diversity_penalty"},
    {HF_ANY, "do_sample"},
    {HF_ANY, "early_stopping"},
    {HF_ANY, "encoder_no_repeat_ngram_size"},
    {HF_ANY, "exponential_decay_length_penalty"},
    {HF_ANY, "finetuning_task"},
    {HF_ANY, "forced_bos_token_id"},
    {HF_ANY, "forced_eos_token_id"},
    {HF_ANY, "is_decoder"},
    {HF_ANY, "is_encoder_decoder"},
    {HF_ANY, "length_penalty"},
    {HF_ANY, "max_length"},
    {HF_ANY, "min_length"},
    {HF_ANY, "no_repeat_ngram_size"},
    {HF_ANY, "num_beam_groups"},
    {HF_ANY, "num_beams"},
    {HF_ANY, "num_return_sequences"},
    {HF_ANY, "output_scores"},
    {HF_ANY, "prefix"},
    {HF_ANY, "problem_type"},
    {HF_ANY, "remove_invalid_values"},
    {HF_ANY, "repetition_penalty"},
    {HF_ANY, "return_dict_in_generate"},
    {HF_ANY, "sep_token_id"},
    {HF_ANY, "suppress_tokens"},
    {HF_ANY, "temperature"},
    {HF_ANY, "tf_legacy_loss"},
    {HF_ANY, "tie_encoder_decoder"},
    {HF_ANY, "top_k"},
    {HF_ANY, "top_p"},
    {HF_ANY, "torchscript"},
    {HF_ANY, "typical_p"},
    {HF_ANY, "use_bfloat16"},
    {HF_ANY, "cross_attention_hidden_size"},
};

typedef struct Rule {
  HfFam fam;
  const char *hf, *mmc;
  HfX x;
  const char *cond;
} Rule;
static const Rule rules[] = {
#undef HF_RULE
#define HF_RULE(fam, hf, mmc, x, cond) {fam, hf, mmc, x, cond},
#include "mmrt_hf_map.def"
#undef HF_RULE
};
#undef HF_FAMILY
#undef HF_ARCH
#undef HF_PART
#undef HF_PART_IF
#undef HF_HP
#undef HF_CHECK
#undef HF_SAME
#undef HF_KEY

#define N(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* ---- the directory ---- */

typedef struct Tensor {
  char *name;
  int file;  /* index into files */
  int index; /* in that file */
  int used;  /* mmrt_hf_match: a source, a tie or a buffer */
  int tie;   /* a HF_TIE rule's tensor: the tensor it equals, or -1 */
} Tensor;

struct MmrtHf {
  char *dir;
  json_object *config;
  const char *arch;
  HfFam fam;
  int nfiles;
  MmrtStFile **files;
  int n;
  Tensor *t;
  int nparts; /* 1 + the family's HF_PART rows: part 0 the family itself */
  const Part *part[8];
  json_object *part_config[8]; /* borrowed from config (or empty) */
  json_object *empty;
  int nhp;
  const char *hp_name[64];
  char hp_value[64][64];
  int hp_part[64];
  int cached; /* mmrt_hf_read's last tensor, as float32 [rows, cols] after the transpose */
  int cached_t;
  float *cache;
};

int mmrt_hf_is_dir(const char *path) {
  char p[4096];
  struct stat st;
  if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) return 0;
  snprintf(p, sizeof p, "%s/config.json", path);
  return stat(p, &st) == 0;
}

void mmrt_hf_close(MmrtHf *h) {
  if (!h) return;
  for (int i = 0; i < h->nfiles; i++) mmrt_st_close(h->files[i]);
  for (int i = 0; i < h->n; i++) free(h->t[i].name);
  free(h->files);
  free(h->t);
  free(h->cache);
  if (h->config) json_object_put(h->config);
  if (h->empty) json_object_put(h->empty);
  free(h->dir);
  free(h);
}

static int add_file(MmrtHf *h, const char *name, char *err, size_t errlen) {
  for (int i = 0; i < h->nfiles; i++) {
    const char *p = mmrt_st_path(h->files[i]), *b = strrchr(p, '/');
    if (strcmp(b ? b + 1 : p, name) == 0) return i;
  }
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", h->dir, name);
  MmrtStFile **nf = realloc(h->files, (size_t)(h->nfiles + 1) * sizeof *nf);
  if (!nf) return mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "out of memory");
  h->files = nf;
  int rc = mmrt_st_open(&h->files[h->nfiles], path, err, errlen);
  if (rc != MMRT_OK) return rc;
  return h->nfiles++;
}

static int add_tensor(MmrtHf *h, const char *name, int file, int index, char *err, size_t errlen) {
  for (int i = 0; i < h->n; i++)
    if (strcmp(h->t[i].name, name) == 0)
      return mmrt_errf(err, errlen, MMRT_ERR_FORMAT, "%s: tensor '%s' is in two shards: %s and %s",
                       h->dir, name, mmrt_st_path(h->files[h->t[i].file]),
                       mmrt_st_path(h->files[file]));
  Tensor *nt = realloc(h->t, (size_t)(h->n + 1) * sizeof *nt);
  if (!nt) return mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "out of memory");
  h->t = nt;
  h->t[h->n] = (Tensor){strdup(name), file, index, 0, -1};
  h->n++;
  return MMRT_OK;
}

static json_object *read_json(const char *path, char *err, size_t errlen, int *rc) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    *rc = mmrt_errf(err, errlen, errno == ENOENT ? MMRT_ERR_NOTFOUND : MMRT_ERR_IO,
                    "%s: cannot open: %s", path, strerror(errno));
    return NULL;
  }
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = len >= 0 ? malloc((size_t)len + 1) : NULL;
  size_t got = buf ? fread(buf, 1, (size_t)len, f) : 0;
  fclose(f);
  if (!buf || got != (size_t)len) {
    free(buf);
    *rc = mmrt_errf(err, errlen, MMRT_ERR_IO, "%s: cannot read", path);
    return NULL;
  }
  buf[len] = 0;
  json_tokener *tok = json_tokener_new();
  json_object *o = tok ? json_tokener_parse_ex(tok, buf, (int)len) : NULL;
  enum json_tokener_error je = tok ? json_tokener_get_error(tok) : json_tokener_error_depth;
  if (tok) json_tokener_free(tok);
  free(buf);
  if (!o || je != json_tokener_success || !json_object_is_type(o, json_type_object)) {
    if (o) json_object_put(o);
    *rc = mmrt_errf(err, errlen, MMRT_ERR_FORMAT, "%s: not a JSON object (%s)", path,
                    je != json_tokener_success ? json_tokener_error_desc(je) : "another value");
    return NULL;
  }
  *rc = MMRT_OK;
  return o;
}

/* The tensors: of model.safetensors, or of the shards the index names. */
static int open_weights(MmrtHf *h, char *err, size_t errlen) {
  char path[4096];
  int rc;
  snprintf(path, sizeof path, "%s/model.safetensors.index.json", h->dir);
  json_object *idx = read_json(path, err, errlen, &rc);
  if (rc == MMRT_ERR_NOTFOUND) {
    snprintf(path, sizeof path, "%s/model.safetensors", h->dir);
    struct stat st;
    if (stat(path, &st) != 0)
      return mmrt_errf(err, errlen, MMRT_ERR_NOTFOUND,
                       "%s: neither model.safetensors nor model.safetensors.index.json (only "
                       "safetensors checkpoints are read)",
                       h->dir);
    int f = add_file(h, "model.safetensors", err, errlen);
    if (f < 0) return f;
    for (int i = 0; i < mmrt_st_count(h->files[f]); i++)
      if ((rc = add_tensor(h, mmrt_st_name(h->files[f], i), f, i, err, errlen)) != MMRT_OK)
        return rc;
    return MMRT_OK;
  }
  if (rc != MMRT_OK) return rc;
  json_object *map;
  if (!json_object_object_get_ex(idx, "weight_map", &map) ||
      !json_object_is_type(map, json_type_object)) {
    json_object_put(idx);
    return mmrt_errf(err, errlen, MMRT_ERR_FORMAT, "%s: no object 'weight_map' {tensor: file}",
                     path);
  }
  rc = MMRT_OK;
  json_object_object_foreach(map, name, file) {
    const char *fn =
        json_object_is_type(file, json_type_string) ? json_object_get_string(file) : NULL;
    if (!fn || !*fn || strchr(fn, '/')) {
      rc = mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                     "%s: weight_map['%s'] is not a file name of this directory", path, name);
      break;
    }
    int f = add_file(h, fn, err, errlen);
    if (f < 0) {
      char inner[512];
      snprintf(inner, sizeof inner, "%s", err);
      rc = mmrt_errf(err, errlen, f, "%s names %s for tensor '%s': %s", path, fn, name, inner);
      break;
    }
    int i = mmrt_st_find(h->files[f], name);
    if (i < 0) {
      rc = mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                     "%s: weight_map puts tensor '%s' in %s, which does not hold it", path, name,
                     fn);
      break;
    }
    if ((rc = add_tensor(h, name, f, i, err, errlen)) != MMRT_OK) break;
  }
  json_object_put(idx);
  if (rc != MMRT_OK) return rc;
  /* every tensor of every shard is in the index */
  for (int f = 0; f < h->nfiles; f++)
    for (int i = 0; i < mmrt_st_count(h->files[f]); i++) {
      const char *nm = mmrt_st_name(h->files[f], i);
      int k = 0;
      while (k < h->n && strcmp(h->t[k].name, nm) != 0) k++;
      if (k == h->n || h->t[k].file != f)
        return mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                         "%s holds tensor '%s', which model.safetensors.index.json does not "
                         "put there",
                         mmrt_st_path(h->files[f]), nm);
    }
  return MMRT_OK;
}

static int json_num(json_object *v, double *out) {
  if (!v || !(json_object_is_type(v, json_type_int) || json_object_is_type(v, json_type_double)))
    return 0;
  *out = json_object_get_double(v);
  return 1;
}

/* c[key], or c[a][b] for key "a.b" */
static int get_key(json_object *c, const char *key, json_object **v) {
  const char *dot = strchr(key, '.');
  if (!dot) return json_object_object_get_ex(c, key, v);
  char head[128];
  json_object *o;
  snprintf(head, sizeof head, "%.*s", (int)(dot - key), key);
  if (!json_object_object_get_ex(c, head, &o) || !json_object_is_type(o, json_type_object))
    return 0;
  return json_object_object_get_ex(o, dot + 1, v);
}

static int known_key(HfFam fam, const char *key) {
  for (int i = 0; i < N(parts); i++)
    if (parts[i].fam == fam && strcmp(parts[i].key, key) == 0) return 1;
  for (int i = 0; i < N(keys); i++)
    if ((keys[i].fam == fam || keys[i].fam == HF_ANY) && strcmp(keys[i].key, key) == 0) return 1;
  for (int i = 0; i < N(hps); i++)
    if (hps[i].fam == fam && ((hps[i].key && strcmp(hps[i].key, key) == 0) ||
                              (hps[i].fallback && strcmp(hps[i].fallback, key) == 0)))
      return 1;
  for (int i = 0; i < N(checks); i++)
    if (checks[i].fam == fam && strcmp(checks[i].key, key) == 0) return 1;
  for (int i = 0; i < N(sames); i++)
    if (sames[i].fam == fam && strcmp(sames[i].key, key) == 0) return 1;
  return 0;
}

/* The config's checks and hyper-parameters: of part `pi` (its family's
 * rules, its config object; kp: "text_config." or "" for the messages). */
static int read_config(MmrtHf *h, int pi, const char *cpath, char *err, size_t errlen) {
  json_object *c = h->part_config[pi];
  HfFam fam = pi ? h->part[pi]->sub : h->fam;
  char kp[64] = "";
  if (pi) snprintf(kp, sizeof kp, "%s.", h->part[pi]->key);
  json_object_object_foreach(c, key, val) {
    (void)val;
    if (!known_key(fam, key))
      return mmrt_errf(
          err, errlen, MMRT_ERR_MISMATCH,
          "%s: key '%s%s' is not known to mmc's mapping of %s (runtime/io/mmrt_hf_map.def); "
          "it may change the model's math, so it is not ignored",
          cpath, kp, key, h->arch);
  }
  for (int i = 0; i < N(checks); i++) {
    const Check *k = &checks[i];
    if (k->fam != fam) continue;
    json_object *v = NULL, *want = json_tokener_parse(k->want);
    int absent = !get_key(c, k->key, &v);
    json_object *have = absent ? json_tokener_parse(k->absent) : json_object_get(v);
    int same = json_object_equal(have, want);
    double a, b;
    if (!same && json_num(have, &a) && json_num(want, &b)) same = a == b;
    char hv[128];
    snprintf(hv, sizeof hv, "%s", json_object_to_json_string_ext(have, JSON_C_TO_STRING_PLAIN));
    json_object_put(have);
    json_object_put(want);
    if (!same)
      return mmrt_errf(err, errlen, MMRT_ERR_MISMATCH,
                       "%s: %s%s is %s%s; mmc's %s supports %s only", cpath, kp, k->key, hv,
                       absent ? " (the default: the key is absent)" : "", families[fam].module,
                       k->want);
  }
  for (int i = 0; i < N(sames); i++) {
    const Same *s = &sames[i];
    json_object *v, *a, *b;
    double x, y, z;
    if (s->fam != fam || !get_key(c, s->key, &v) || json_object_is_type(v, json_type_null))
      continue;
    if (!json_num(v, &x) || !get_key(c, s->num, &a) || !json_num(a, &y) ||
        !get_key(c, s->den, &b) || !json_num(b, &z) || z == 0 || x * z != y)
      return mmrt_errf(err, errlen, MMRT_ERR_MISMATCH,
                       "%s: %s%s is %s; mmc's %s supports only %s / %s", cpath, kp, s->key,
                       json_object_to_json_string(v), families[fam].module, s->num, s->den);
  }
  for (int i = 0; i < N(hps); i++) {
    const Hp *p = &hps[i];
    if (p->fam != fam) continue;
    if (h->nhp == N(h->hp_name))
      return mmrt_errf(err, errlen, MMRT_ERR_ARG, "too many hyper-parameters");
    json_object *v = NULL;
    const char *from = p->key;
    if (!p->key || !get_key(c, p->key, &v) || json_object_is_type(v, json_type_null)) {
      v = NULL, from = p->fallback;
      if (p->fallback && (!get_key(c, p->fallback, &v) || json_object_is_type(v, json_type_null)))
        v = NULL;
    }
    char *out = h->hp_value[h->nhp];
    if (!v && !p->def)
      return mmrt_errf(err, errlen, MMRT_ERR_FORMAT, "%s: no '%s%s' (%s's %s)", cpath, kp, p->key,
                       families[fam].module, p->name);
    if (!v) {
      snprintf(out, 64, "%s", p->def);
    } else if (p->kind == HF_BOOL) {
      if (!json_object_is_type(v, json_type_boolean))
        return mmrt_errf(err, errlen, MMRT_ERR_FORMAT, "%s: %s is not true or false", cpath, from);
      snprintf(out, 64, "%s", json_object_get_boolean(v) ? "true" : "false");
    } else if (p->kind == HF_INT) {
      int64_t x;
      if (json_object_is_type(v, json_type_array) && json_object_array_length(v) > 0) {
        /* a square's sides ([448, 448]: InternVL's image_size, patch_size): all equal */
        json_object *v0 = json_object_array_get_idx(v, 0);
        for (size_t k = 1; k < json_object_array_length(v); k++)
          if (!json_object_equal(v0, json_object_array_get_idx(v, k)))
            return mmrt_errf(err, errlen, MMRT_ERR_MISMATCH,
                             "%s: %s%s is %s; mmc's %s supports equal sides only", cpath, kp, from,
                             json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN),
                             families[fam].module);
        v = v0;
      }
      if (!json_object_is_type(v, json_type_int) || (x = json_object_get_int64(v)) < 0)
        return mmrt_errf(err, errlen, MMRT_ERR_FORMAT, "%s: %s is not a non-negative integer",
                         cpath, from);
      snprintf(out, 64, "%lld", (long long)x);
    } else {
      double x;
      if (!json_num(v, &x))
        return mmrt_errf(err, errlen, MMRT_ERR_FORMAT, "%s: %s is not a number", cpath, from);
      snprintf(out, 64, "%.15g", x);
      if (strtod(out, NULL) != x) snprintf(out, 64, "%.17g", x);
      if (!strpbrk(out, ".eEn")) strcat(out, ".0"); /* a float literal */
    }
    h->hp_part[h->nhp] = pi;
    h->hp_name[h->nhp++] = p->name;
  }
  return MMRT_OK;
}

/* The family's parts (HF_PART), each with its nested config object, then
 * every part's config read. */
static int read_configs(MmrtHf *h, const char *cpath, char *err, size_t errlen) {
  h->nparts = 1;
  h->part_config[0] = h->config;
  for (int i = 0; i < N(parts); i++) {
    if (parts[i].fam != h->fam) continue;
    int taken = 0; /* HF_PART_IF rows of one key: the first whose model_type the config has */
    for (int k = 1; k < h->nparts; k++) taken |= strcmp(h->part[k]->key, parts[i].key) == 0;
    if (taken) continue;
    if (h->nparts == N(h->part)) return mmrt_errf(err, errlen, MMRT_ERR_ARG, "too many parts");
    json_object *o, *mt;
    if (!json_object_object_get_ex(h->config, parts[i].key, &o) ||
        json_object_is_type(o, json_type_null)) {
      if (!h->empty && !(h->empty = json_object_new_object()))
        return mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "out of memory");
      o = h->empty; /* absent: transformers' defaults */
    } else if (!json_object_is_type(o, json_type_object)) {
      return mmrt_errf(err, errlen, MMRT_ERR_FORMAT, "%s: %s is not an object", cpath,
                       parts[i].key);
    }
    if (parts[i].type && json_object_object_get_ex(o, "model_type", &mt) &&
        (!json_object_is_type(mt, json_type_string) ||
         strcmp(json_object_get_string(mt), parts[i].type) != 0)) {
      int last = 1; /* no later row of this key: the model_type is not mapped */
      for (int k = i + 1; k < N(parts); k++)
        last &= !(parts[k].fam == h->fam && strcmp(parts[k].key, parts[i].key) == 0);
      if (!last) continue;
      char types[256] = "";
      for (int k = 0; k < N(parts); k++)
        if (parts[k].fam == h->fam && strcmp(parts[k].key, parts[i].key) == 0 && parts[k].type)
          snprintf(types + strlen(types), sizeof types - strlen(types), "%s\"%s\"",
                   types[0] ? " or " : "", parts[k].type);
      return mmrt_errf(err, errlen, MMRT_ERR_MISMATCH, "%s: %s.model_type is %s; mmc maps %s only",
                       cpath, parts[i].key,
                       json_object_to_json_string_ext(mt, JSON_C_TO_STRING_PLAIN), types);
    }
    h->part[h->nparts] = &parts[i];
    h->part_config[h->nparts++] = o;
  }
  for (int pi = 0; pi < h->nparts; pi++) {
    int rc = read_config(h, pi, cpath, err, errlen);
    if (rc != MMRT_OK) return rc;
  }
  return MMRT_OK;
}

int mmrt_hf_open(MmrtHf **out, const char *dir, char *err, size_t errlen) {
  *out = NULL;
  MmrtHf *h = calloc(1, sizeof *h);
  if (!h || !(h->dir = strdup(dir))) {
    free(h);
    return mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "out of memory");
  }
  h->cached = -1;
  char cpath[4096];
  snprintf(cpath, sizeof cpath, "%s/config.json", dir);
  int rc;
  h->config = read_json(cpath, err, errlen, &rc);
  json_object *a;
  if (rc == MMRT_OK &&
      (!json_object_object_get_ex(h->config, "architectures", &a) ||
       !json_object_is_type(a, json_type_array) || json_object_array_length(a) != 1 ||
       !json_object_is_type(json_object_array_get_idx(a, 0), json_type_string)))
    rc = mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                   "%s: expected 'architectures': [one class name] (e.g. [\"Qwen2ForCausalLM\"])",
                   cpath);
  if (rc == MMRT_OK) {
    h->arch = json_object_get_string(json_object_array_get_idx(a, 0));
    int k = 0;
    while (k < N(archs) && strcmp(archs[k].name, h->arch) != 0) k++;
    if (k == N(archs)) {
      char list[512] = "";
      for (int i = 0; i < N(archs); i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "",
                 archs[i].name);
      rc =
          mmrt_errf(err, errlen, MMRT_ERR_MISMATCH,
                    "%s: architecture '%s' is not one mmc maps (it maps %s)", cpath, h->arch, list);
    } else {
      h->fam = archs[k].fam;
    }
  }
  if (rc == MMRT_OK) rc = read_configs(h, cpath, err, errlen);
  if (rc == MMRT_OK) rc = open_weights(h, err, errlen);
  for (int i = 0; rc == MMRT_OK && i < h->n; i++) {
    MmrtStDtype dt;
    mmrt_st_info(h->files[h->t[i].file], h->t[i].index, &dt, NULL, NULL);
    if (dt != MMRT_ST_F32 && dt != MMRT_ST_BF16 && dt != MMRT_ST_F16)
      rc = mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                     "%s: tensor '%s' is %s, expected F32, BF16 or F16",
                     mmrt_st_path(h->files[h->t[i].file]), h->t[i].name, mmrt_st_dtype_name(dt));
  }
  if (rc != MMRT_OK) {
    mmrt_hf_close(h);
    return rc;
  }
  *out = h;
  return MMRT_OK;
}

const char *mmrt_hf_dir(const MmrtHf *h) {
  return h->dir;
}
const char *mmrt_hf_arch(const MmrtHf *h) {
  return h->arch;
}
const char *mmrt_hf_stdlib(const MmrtHf *h) {
  return families[h->fam].file;
}
const char *mmrt_hf_module(const MmrtHf *h) {
  return families[h->fam].module;
}
const char *mmrt_hf_instance(const MmrtHf *h) {
  return families[h->fam].instance;
}
const char *mmrt_hf_model(const MmrtHf *h) {
  return families[h->fam].model;
}
int mmrt_hf_nhparams(const MmrtHf *h) {
  return mmrt_hf_part_nhparams(h, 0);
}
const char *mmrt_hf_hparam(const MmrtHf *h, int i, const char **value) {
  return mmrt_hf_part_hparam(h, 0, i, value);
}
int mmrt_hf_nparts(const MmrtHf *h) {
  return h->nparts - 1;
}
const char *mmrt_hf_part(const MmrtHf *h, int k, const char **stdlib, const char **module) {
  const Part *p = h->part[k];
  *stdlib = families[p->sub].file;
  *module = families[p->sub].module;
  return p->inst;
}
int mmrt_hf_part_nhparams(const MmrtHf *h, int k) {
  int n = 0;
  for (int i = 0; i < h->nhp; i++) n += h->hp_part[i] == k;
  return n;
}
const char *mmrt_hf_part_hparam(const MmrtHf *h, int k, int i, const char **value) {
  for (int j = 0; j < h->nhp; j++)
    if (h->hp_part[j] == k && i-- == 0) {
      *value = h->hp_value[j];
      return h->hp_name[j];
    }
  *value = NULL;
  return NULL;
}
int mmrt_hf_config_int(const MmrtHf *h, const char *key, int64_t *out) {
  json_object *v;
  if (!json_object_object_get_ex(h->config, key, &v) || !json_object_is_type(v, json_type_int))
    return 0;
  *out = json_object_get_int64(v);
  return 1;
}
int mmrt_hf_added_token(const MmrtHf *h, const char *token, int64_t *out, char *err,
                        size_t errlen) {
  char path[4096];
  int rc;
  snprintf(path, sizeof path, "%s/added_tokens.json", h->dir);
  json_object *o = read_json(path, err, errlen, &rc), *v;
  if (rc != MMRT_OK) return rc;
  rc = json_object_object_get_ex(o, token, &v) && json_object_is_type(v, json_type_int) &&
               json_object_get_int64(v) >= 0
           ? MMRT_OK
           : mmrt_errf(err, errlen, MMRT_ERR_FORMAT, "%s: no token '%s' with a whole-number id",
                       path, token);
  if (rc == MMRT_OK) *out = json_object_get_int64(v);
  json_object_put(o);
  return rc;
}
int mmrt_hf_ntensors(const MmrtHf *h) {
  return h->n;
}
const char *mmrt_hf_tensor(const MmrtHf *h, int i, MmrtStDtype *dtype, int *ndim,
                           const int64_t **shape) {
  mmrt_st_info(h->files[h->t[i].file], h->t[i].index, dtype, ndim, shape);
  return h->t[i].name;
}
const char *mmrt_hf_tensor_file(const MmrtHf *h, int i) {
  return mmrt_st_path(h->files[h->t[i].file]);
}

/* ---- matching ---- */

/* name against pattern with one optional {L}: 1 and *layer (-1: none). */
static int match(const char *pat, const char *name, long *layer) {
  const char *l = strstr(pat, "{L}");
  *layer = -1;
  if (!l) return strcmp(pat, name) == 0;
  size_t pre = (size_t)(l - pat);
  if (strncmp(pat, name, pre) != 0) return 0;
  const char *d = name + pre;
  if (*d < '0' || *d > '9' || (*d == '0' && d[1] >= '0' && d[1] <= '9')) return 0;
  char *end;
  *layer = strtol(d, &end, 10);
  return strcmp(end, l + 3) == 0;
}

/* prefix "." inst "." pat, empty parts and their dots left out, {L} = layer */
static void expand(char *buf, size_t len, const char *prefix, const char *inst, const char *pat,
                   long layer) {
  const char *l = strstr(pat, "{L}");
  char pre[200];
  if (!prefix) prefix = "";
  snprintf(pre, sizeof pre, "%s%s%s%s", prefix, *prefix && *inst ? "." : "", inst,
           *prefix || *inst ? "." : "");
  if (!l)
    snprintf(buf, len, "%s%s", pre, pat);
  else
    snprintf(buf, len, "%s%.*s%ld%s", pre, (int)(l - pat), pat, layer, l + 3);
}

static void shape_text(char *buf, size_t len, int nd, const int64_t *s) {
  size_t k = (size_t)snprintf(buf, len, "[");
  for (int d = 0; d < nd && k < len; d++)
    k += (size_t)snprintf(buf + k, len - k, "%s%lld", d ? ", " : "", (long long)s[d]);
  if (k < len) snprintf(buf + k, len - k, "]");
}

static int cond_holds(const MmrtHf *h, int part, const char *cond) {
  if (!cond) return 1;
  int neg = cond[0] == '!';
  for (int i = 0; i < h->nhp; i++)
    if (h->hp_part[i] == part && strcmp(h->hp_name[i], cond + neg) == 0)
      return (strcmp(h->hp_value[i], "true") == 0) != neg;
  return neg;
}

static int under(const char *name, const char *prefix) {
  size_t k = prefix ? strlen(prefix) : 0;
  return !k || (strncmp(name, prefix, k) == 0 && name[k] == '.');
}

int mmrt_hf_match(MmrtHf *h, const char *prefix, const MmrtHfParam *p, int n, MmrtHfSrc *src,
                  char *err, size_t errlen) {
  for (int j = 0; j < n; j++) src[j] = (MmrtHfSrc){-1, 0, 0};
  for (int i = 0; i < h->n; i++) h->t[i].used = 0, h->t[i].tie = -1;
  char mname[512], a[160], b[160];
  for (int i = 0; i < h->n; i++) {
    Tensor *t = &h->t[i];
    MmrtStDtype dt;
    int nd;
    const int64_t *sh;
    mmrt_st_info(h->files[t->file], t->index, &dt, &nd, &sh);
    const char *file = mmrt_st_path(h->files[t->file]);
    int64_t row = 0, full = 0;
    /* the part whose HF prefix the name has (part 0: the family's own rules, no prefix) */
    int pi = h->nparts - 1;
    while (pi > 0 && strncmp(t->name, h->part[pi]->hfp, strlen(h->part[pi]->hfp)) != 0) pi--;
    HfFam fam = pi ? h->part[pi]->sub : h->fam;
    const char *tname = t->name + (pi ? strlen(h->part[pi]->hfp) : 0),
               *inst = pi ? h->part[pi]->inst : "";
    for (int r = 0; r < N(rules); r++) {
      const Rule *u = &rules[r];
      long layer;
      if (u->fam != fam || !cond_holds(h, pi, u->cond) || !match(u->hf, tname, &layer)) continue;
      t->used = 1;
      if (u->x == HF_SKIP) break;
      expand(mname, sizeof mname, prefix, inst, u->mmc, layer);
      int j = 0;
      while (j < n && strcmp(p[j].name, mname) != 0) j++;
      if (u->x == HF_TIE) { /* the source of the parameter it is tied to, found below */
        t->tie = j < n ? j : -2;
        if (j == n)
          return mmrt_errf(err, errlen, MMRT_ERR_MISMATCH,
                           "%s: tensor '%s' is tied to model parameter '%s', which the model "
                           "does not have",
                           file, t->name, mname);
        break;
      }
      if (j == n)
        return mmrt_errf(err, errlen, MMRT_ERR_MISMATCH,
                         "%s: tensor '%s' maps to model parameter '%s', which the model does not "
                         "have (another size or architecture?)",
                         file, t->name, mname);
      if (src[j].tensor >= 0)
        return mmrt_errf(err, errlen, MMRT_ERR_MISMATCH,
                         "%s: tensor '%s' and tensor '%s' both map to model parameter '%s'", file,
                         t->name, h->t[src[j].tensor].name, mname);
      int tr = u->x == HF_T || u->x == HF_T_SPLIT, split = u->x == HF_SPLIT || u->x == HF_T_SPLIT;
      int64_t hs[MMRT_ST_MAX_DIMS];
      for (int d = 0; d < nd; d++) hs[d] = sh[d];
      if (tr && nd == 2) hs[0] = sh[1], hs[1] = sh[0];
      int ok = !tr || nd == 2;
      ok = ok && nd == p[j].ndim;
      for (int d = split ? 1 : 0; ok && d < nd; d++) ok = hs[d] == p[j].shape[d];
      if (ok && split) ok = nd >= 1 && row + p[j].shape[0] <= hs[0];
      if (!ok) {
        shape_text(a, sizeof a, nd, sh);
        shape_text(b, sizeof b, p[j].ndim, p[j].shape);
        return mmrt_errf(err, errlen, MMRT_ERR_MISMATCH,
                         "%s: tensor '%s' is %s %s%s; model parameter '%s' is %s%s", file, t->name,
                         mmrt_st_dtype_name(dt), a, tr ? " (transposed on loading)" : "", mname, b,
                         split ? " (one part of the fused tensor)" : "");
      }
      src[j] = (MmrtHfSrc){i, split ? row : 0, tr};
      if (split) row += p[j].shape[0], full = hs[0];
      if (!split) break;
    }
    if (!t->used)
      return mmrt_errf(err, errlen, MMRT_ERR_MISMATCH,
                       "%s: tensor '%s' matches no rule of mmc's %s mapping "
                       "(runtime/io/mmrt_hf_map.def)",
                       file, t->name, h->arch);
    if (row != full) { /* the parts cover the fused tensor */
      shape_text(a, sizeof a, nd, sh);
      return mmrt_errf(err, errlen, MMRT_ERR_MISMATCH,
                       "%s: tensor '%s' is %s; its parts in the model have %lld rows, not %lld",
                       file, t->name, a, (long long)row, (long long)full);
    }
  }
  /* ties: the tied-to parameter has a source of the tie's shape */
  for (int i = 0; i < h->n; i++) {
    if (h->t[i].tie < 0) continue;
    int j = h->t[i].tie;
    if (src[j].tensor < 0)
      return mmrt_errf(err, errlen, MMRT_ERR_MISMATCH,
                       "%s: tensor '%s' is tied to '%s', which has no tensor", h->dir, h->t[i].name,
                       p[j].name);
    const int64_t *s1, *s2;
    int n1, n2;
    mmrt_st_info(h->files[h->t[i].file], h->t[i].index, NULL, &n1, &s1);
    int k = src[j].tensor;
    mmrt_st_info(h->files[h->t[k].file], h->t[k].index, NULL, &n2, &s2);
    int same = n1 == n2;
    for (int d = 0; same && d < n1; d++) same = s1[d] == s2[d];
    if (!same) {
      shape_text(a, sizeof a, n1, s1);
      shape_text(b, sizeof b, n2, s2);
      return mmrt_errf(err, errlen, MMRT_ERR_MISMATCH, "%s: tied tensor '%s' is %s, tensor '%s' %s",
                       h->dir, h->t[i].name, a, h->t[k].name, b);
    }
    h->t[i].tie = k;
  }
  for (int j = 0; j < n; j++)
    if (under(p[j].name, prefix) && src[j].tensor < 0) {
      shape_text(b, sizeof b, p[j].ndim, p[j].shape);
      return mmrt_errf(err, errlen, MMRT_ERR_MISMATCH,
                       "%s: no tensor for model parameter '%s' %s (the %s mapping gives it none: "
                       "another size or architecture?)",
                       h->dir, p[j].name, b, h->arch);
    }
  return MMRT_OK;
}

/* ---- reading ---- */

float mmrt_hf_bf16(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

float mmrt_hf_f16(uint16_t b) {
  uint32_t s = (uint32_t)(b >> 15) << 31, e = (b >> 10) & 31, m = b & 1023, u;
  if (e == 0) {
    if (!m) {
      u = s;
    } else { /* subnormal: normalise */
      e = 113;
      while (!(m & 1024)) m <<= 1, e--;
      u = s | e << 23 | (m & 1023) << 13;
    }
  } else if (e == 31) {
    u = s | 0x7f800000u | m << 13;
  } else {
    u = s | (e + 112) << 23 | m << 13;
  }
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* Tensor i whole as float32 (transposed when tr), into h->cache. */
static int load_tensor(MmrtHf *h, int i, int tr, char *err, size_t errlen) {
  if (h->cached == i && h->cached_t == tr) return MMRT_OK;
  h->cached = -1;
  MmrtStDtype dt;
  int nd;
  const int64_t *sh;
  mmrt_st_info(h->files[h->t[i].file], h->t[i].index, &dt, &nd, &sh);
  size_t n = 1;
  for (int d = 0; d < nd; d++) n *= (size_t)sh[d];
  size_t es = mmrt_st_dtype_size(dt);
  void *raw = malloc(n * es + 1);
  float *f = realloc(h->cache, n * sizeof *f + 4);
  if (!raw || !f) {
    free(raw);
    return mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "out of memory reading tensor '%s'",
                     h->t[i].name);
  }
  h->cache = f;
  int rc = mmrt_st_read_raw(h->files[h->t[i].file], h->t[i].index, raw, err, errlen);
  if (rc != MMRT_OK) {
    free(raw);
    return rc;
  }
  size_t rows = nd == 2 ? (size_t)sh[0] : 1, cols = nd == 2 ? (size_t)sh[1] : n;
  for (size_t k = 0; k < n; k++) {
    float x = dt == MMRT_ST_F32    ? ((const float *)raw)[k]
              : dt == MMRT_ST_BF16 ? mmrt_hf_bf16(((const uint16_t *)raw)[k])
                                   : mmrt_hf_f16(((const uint16_t *)raw)[k]);
    if (tr && nd == 2)
      f[(k % cols) * rows + k / cols] = x;
    else
      f[k] = x;
  }
  free(raw);
  h->cached = i, h->cached_t = tr;
  return MMRT_OK;
}

/* Elements [lo, hi) of tensor i, as stored, into out as float32: a stretch
 * of a rank's part of a parameter, the rest of the tensor unread. */
static int read_span(MmrtHf *h, int i, int64_t lo, int64_t hi, float *out, char *err,
                     size_t errlen) {
  MmrtStDtype dt;
  int nd;
  const int64_t *sh;
  mmrt_st_info(h->files[h->t[i].file], h->t[i].index, &dt, &nd, &sh);
  size_t n = (size_t)(hi - lo), es = mmrt_st_dtype_size(dt);
  void *raw = dt == MMRT_ST_F32 ? (void *)out : malloc(n * es + 1);
  if (!raw)
    return mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "out of memory reading tensor '%s'",
                     h->t[i].name);
  int rc = mmrt_st_read_part(h->files[h->t[i].file], h->t[i].index, (uint64_t)lo * es, n * es, raw,
                             err, errlen);
  for (size_t k = 0; rc == MMRT_OK && dt != MMRT_ST_F32 && k < n; k++)
    out[k] = dt == MMRT_ST_BF16 ? mmrt_hf_bf16(((const uint16_t *)raw)[k])
                                : mmrt_hf_f16(((const uint16_t *)raw)[k]);
  if (raw != out) free(raw);
  return rc;
}

int mmrt_hf_read(MmrtHf *h, const MmrtHfParam *p, const MmrtHfSrc *s, const MmrtSlice *want,
                 float *dst, char *err, size_t errlen) {
  int r = p->ndim;
  int64_t inner = 1, count = 1, numel = r ? p->shape[0] : 1;
  for (int d = 1; d < r; d++) inner *= p->shape[d];
  for (int d = 0; d < r; d++) count *= want->len[d];
  numel *= inner;
  int64_t sstr[MMRT_ST_MAX_DIMS], idx[MMRT_ST_MAX_DIMS] = {0};
  for (int d = r - 1, k = 1; d >= 0; d--) sstr[d] = k, k *= (int)p->shape[d];
  /* a part (tp, ZeRO) of a tensor stored in the parameter's layout, and not
   * at hand whole: its runs alone, each stretch of adjacent ones one read */
  int part = r > 0 && count > 0 && count < numel && !s->transpose && h->cached != s->tensor;
  const float *whole = NULL; /* the parameter, whole */
  if (!part) {
    int rc = load_tensor(h, s->tensor, s->transpose, err, errlen);
    if (rc != MMRT_OK) return rc;
    whole = h->cache + (size_t)(s->row0 * inner);
    if (r == 0) dst[0] = whole[0];
    if (r == 0 || !count) return MMRT_OK;
  }
  int64_t run = want->len[r - 1], runs = count / run, base = s->row0 * inner, at = 0, len = 0;
  float *to = dst;
  for (int64_t q = 0; q <= runs; q++) {
    int64_t so = want->first[r - 1];
    for (int d = 0; d < r - 1 && q < runs; d++) so += (want->first[d] + idx[d]) * sstr[d];
    if (whole) {
      if (q < runs) memcpy(dst + q * run, whole + so, (size_t)run * sizeof *dst);
    } else if (q < runs && len && so == at + len) {
      len += run;
    } else {
      if (len) {
        int rc = read_span(h, s->tensor, base + at, base + at + len, to, err, errlen);
        if (rc != MMRT_OK) return rc;
      }
      to = dst + q * run, at = so, len = run;
    }
    for (int d = r - 2; d >= 0 && ++idx[d] == want->len[d]; d--) idx[d] = 0;
  }
  return MMRT_OK;
}

int mmrt_hf_check_ties(MmrtHf *h, char *err, size_t errlen) {
  for (int i = 0; i < h->n; i++) {
    int k = h->t[i].tie;
    if (k < 0) continue;
    int rc = load_tensor(h, k, 0, err, errlen);
    if (rc != MMRT_OK) return rc;
    MmrtStDtype dt;
    int nd;
    const int64_t *sh;
    mmrt_st_info(h->files[h->t[k].file], h->t[k].index, &dt, &nd, &sh);
    size_t n = 1;
    for (int d = 0; d < nd; d++) n *= (size_t)sh[d];
    float *keep = malloc(n * sizeof *keep + 4);
    if (!keep) return mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "out of memory");
    memcpy(keep, h->cache, n * sizeof *keep);
    rc = load_tensor(h, i, 0, err, errlen);
    size_t at = 0;
    while (rc == MMRT_OK && at < n && keep[at] == h->cache[at]) at++;
    free(keep);
    if (rc != MMRT_OK) return rc;
    if (at < n)
      return mmrt_errf(
          err, errlen, MMRT_ERR_MISMATCH,
          "%s: tensor '%s' differs from '%s' (element %zu), to which mmc's %s ties it; "
          "the model cannot hold both",
          mmrt_hf_tensor_file(h, i), h->t[i].name, h->t[k].name, at, h->arch);
  }
  return MMRT_OK;
}

/* ---- export ---- */

/* Tensor i of h, whole, in its own layout, from the parameters (or a tie's
 * or buffer's source); buf holds its elements. */
static int assemble(MmrtHf *h, int i, const MmrtHfParam *p, MmrtHfGet get, void *ctx,
                    const MmrtHfSrc *src, int n, float *buf, char *err, size_t errlen) {
  int nd;
  const int64_t *sh;
  mmrt_st_info(h->files[h->t[i].file], h->t[i].index, NULL, &nd, &sh);
  size_t numel = 1;
  for (int d = 0; d < nd; d++) numel *= (size_t)sh[d];
  int k = h->t[i].tie >= 0 ? h->t[i].tie : i, parts = 0;
  for (int j = 0; j < n; j++) {
    if (src[j].tensor != k) continue;
    parts++;
    const float *data;
    int rc = get(ctx, j, &data, err, errlen);
    if (rc != MMRT_OK) return rc;
    int64_t inner = 1, rows = p[j].ndim ? p[j].shape[0] : 1;
    for (int d = 1; d < p[j].ndim; d++) inner *= p[j].shape[d];
    if (!src[j].transpose) {
      memcpy(buf + src[j].row0 * inner, data, (size_t)(rows * inner) * sizeof *buf);
    } else { /* the file holds [in, out]: element (c, row0 + r) is the parameter's (r, c) */
      int64_t out = sh[1];
      for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < inner; c++) buf[c * out + src[j].row0 + r] = data[r * inner + c];
    }
  }
  if (parts) return MMRT_OK;
  int rc = load_tensor(h, i, 0, err, errlen); /* a buffer: as the source has it */
  if (rc == MMRT_OK) memcpy(buf, h->cache, numel * sizeof *buf);
  return rc;
}

static int copy_file(const char *from, const char *to, char *err, size_t errlen) {
  FILE *f = fopen(from, "rb");
  if (!f) return MMRT_ERR_NOTFOUND;
  size_t cap = 1 << 16, len = 0, got;
  char *b = malloc(cap);
  while (b && (got = fread(b + len, 1, cap - len, f)) > 0)
    if ((len += got) == cap) {
      char *nb = realloc(b, cap *= 2);
      if (!nb) free(b);
      b = nb;
    }
  fclose(f);
  if (!b) return mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "out of memory copying %s", from);
  int rc = mmrt_write_file_atomic(to, b, len, err, errlen);
  free(b);
  return rc;
}

/* float32 to bf16, round to nearest even (NaN stays NaN). */
static uint16_t to_bf16(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)(u >> 16 | 0x40);
  return (uint16_t)((u + 0x7fffu + (u >> 16 & 1)) >> 16);
}

/* The files of an earlier export in out (model.safetensors, shards, index). */
static void remove_weights(const char *out) {
  char path[4096];
  DIR *d = opendir(out);
  struct dirent *e;
  int a, b;
  char tail[32];
  while (d && (e = readdir(d)) != NULL)
    if (strcmp(e->d_name, "model.safetensors") == 0 ||
        strcmp(e->d_name, "model.safetensors.index.json") == 0 ||
        (sscanf(e->d_name, "model-%5d-of-%5d%31s", &a, &b, tail) == 3 &&
         strcmp(tail, ".safetensors") == 0)) {
      snprintf(path, sizeof path, "%s/%s", out, e->d_name);
      remove(path);
    }
  if (d) closedir(d);
}

/* mmrt_st_save_stream's fill: tensor i of shard's range assembled (and
 * rounded to bf16) into one buffer, the size of the largest tensor. */
typedef struct Stream {
  MmrtHf *h;
  const MmrtHfParam *p;
  MmrtHfGet get;
  void *ctx;
  const MmrtHfSrc *src;
  int n, first, bf16, next; /* next: the tensors assembled so far (in index order) */
  const MmrtTensorRef *refs;
  float *buf;
} Stream;

static int fill_tensor(void *ctx, int k, const void **bytes, char *err, size_t errlen) {
  Stream *s = ctx;
  int i = s->first + k;
  s->next = i + 1;
  int rc = assemble(s->h, i, s->p, s->get, s->ctx, s->src, s->n, s->buf, err, errlen);
  if (rc != MMRT_OK) return rc;
  if (s->bf16) { /* in place: 2 of the 4 bytes */
    size_t numel = mmrt_tensor_bytes(&s->refs[i]) / 2;
    uint16_t *b = (uint16_t *)s->buf;
    for (size_t e = 0; e < numel; e++) b[e] = to_bf16(s->buf[e]);
  }
  *bytes = s->buf;
  return MMRT_OK;
}

int mmrt_hf_export(MmrtHf *h, const char *prefix, const MmrtHfParam *p, int n, MmrtHfGet get,
                   void *ctx, const char *out, int bf16, int64_t shard_bytes, char *err,
                   size_t errlen) {
  MmrtHfSrc *src = calloc((size_t)n + 1, sizeof *src);
  MmrtTensorRef *refs = calloc((size_t)h->n + 1, sizeof *refs);
  int rc = src && refs ? MMRT_OK : mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "out of memory");
  if (rc == MMRT_OK) rc = mmrt_hf_match(h, prefix, p, n, src, err, errlen);
  int matched = rc == MMRT_OK; /* every rank's get calls from here on */
  if (rc == MMRT_OK && out && mkdir(out, 0755) != 0 && errno != EEXIST)
    rc = mmrt_errf(err, errlen, MMRT_ERR_IO, "%s: cannot create the folder: %s", out,
                   strerror(errno));
  size_t most = 1; /* the largest tensor's elements: the one buffer they are written from */
  for (int i = 0; matched && i < h->n; i++) {
    const int64_t *sh;
    refs[i].name = h->t[i].name;
    refs[i].dtype = bf16 ? MMRT_ST_BF16 : MMRT_ST_F32;
    mmrt_st_info(h->files[h->t[i].file], h->t[i].index, NULL, &refs[i].ndim, &sh);
    size_t numel = 1;
    for (int d = 0; d < refs[i].ndim; d++) numel *= (size_t)(refs[i].shape[d] = sh[d]);
    if (numel > most) most = numel;
  }
  Stream st = {h, p, get, ctx, src, n, 0, bf16, 0, refs, NULL};
  if (matched && !(st.buf = malloc(most * sizeof(float) + 4)))
    rc = mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "out of memory for a tensor of %zu elements", most);
  if (!out) { /* a rank that does not write: the writer's get calls, in its order */
    for (int i = 0; matched && st.buf && i < h->n; i++) {
      int e = assemble(h, i, p, get, ctx, src, n, st.buf, err, errlen);
      if (rc == MMRT_OK) rc = e;
    }
    free(st.buf);
    free(refs);
    free(src);
    return rc;
  }
  char path[4096], from[4096];
  static const char *const keep[] = {"config.json",
                                     "generation_config.json",
                                     "tokenizer.json",
                                     "tokenizer_config.json",
                                     "special_tokens_map.json",
                                     "vocab.json",
                                     "merges.txt",
                                     "tokenizer.model",
                                     "added_tokens.json"};
  for (size_t k = 0; rc == MMRT_OK && k < sizeof keep / sizeof keep[0]; k++) {
    snprintf(from, sizeof from, "%s/%s", h->dir, keep[k]);
    snprintf(path, sizeof path, "%s/%s", out, keep[k]);
    int c = copy_file(from, path, err, errlen);
    if (c != MMRT_ERR_NOTFOUND) rc = c;
  }
  /* shards: consecutive tensors while they fit */
  int *shard = calloc((size_t)h->n + 1, sizeof *shard), nshards = 0;
  int64_t used = 0, total = 0;
  if (!shard && rc == MMRT_OK) rc = mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "out of memory");
  for (int i = 0; rc == MMRT_OK && i < h->n; i++) {
    int64_t b = (int64_t)mmrt_tensor_bytes(&refs[i]);
    if (!nshards || (used > 0 && used + b > shard_bytes)) nshards++, used = 0;
    shard[i] = nshards - 1, used += b, total += b;
  }
  if (rc == MMRT_OK) remove_weights(out);
  MmrtKV meta[] = {{"format", "pt"}};
  json_object *idx = json_object_new_object(), *map = json_object_new_object(),
              *md = json_object_new_object();
  for (int s = 0; rc == MMRT_OK && s < nshards; s++) {
    char name[64];
    if (nshards == 1)
      snprintf(name, sizeof name, "model.safetensors");
    else
      snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", s + 1, nshards);
    int first = 0, count = 0;
    while (shard[first] != s) first++;
    while (first + count < h->n && shard[first + count] == s) {
      json_object_object_add(map, refs[first + count].name, json_object_new_string(name));
      count++;
    }
    snprintf(path, sizeof path, "%s/%s", out, name);
    st.first = first;
    rc = mmrt_st_save_stream(path, refs + first, count, meta, 1, fill_tensor, &st, err, errlen);
  }
  if (rc == MMRT_OK && nshards > 1) {
    json_object_object_add(md, "total_size", json_object_new_int64(total));
    json_object_object_add(idx, "metadata", json_object_get(md));
    json_object_object_add(idx, "weight_map", json_object_get(map));
    const char *text = json_object_to_json_string_ext(idx, JSON_C_TO_STRING_PRETTY);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", out);
    rc = mmrt_write_file_atomic(path, text, strlen(text), err, errlen);
  }
  json_object_put(idx);
  json_object_put(map);
  json_object_put(md);
  /* an error: the rest of the get calls still made (the other ranks make them) */
  char ignore[64];
  for (int i = st.next; matched && rc != MMRT_OK && st.buf && i < h->n; i++)
    assemble(h, i, p, get, ctx, src, n, st.buf, ignore, sizeof ignore);
  free(shard);
  free(st.buf);
  free(refs);
  free(src);
  return rc;
}
