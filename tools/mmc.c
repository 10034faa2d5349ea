/* mmc: the command-line driver. The only place that calls exit().
 *   mmc check   FILE.mm                      parse, resolve, shape-check every model
 *   mmc dump-ir FILE.mm [--model NAME] [--after PASS|all] [--format text|dot] [--rank R]
 *   mmc stats   FILE.mm --model NAME [--json]
 *   mmc plan    FILE.mm --model NAME [--detail | --json]   a summary; the long form; everything
 *   mmc compile FILE.mm --model NAME -o trainer [--emit exe|obj|llvm|asm|ir] [-O0..-O3]
 *   mmc opt     FILE.mmir --passes a,b,...         run passes on IR text, print the result
 *   mmc tokenize TOKENIZER.json [FILE] [--decode]  text to token ids and back (mmc_tokenize.c)
 *   mmc data preprocess|inspect ...  JSONL to Megatron's .bin/.idx, and its contents (mmc_data.c)
 *   mmc image FILE... [--mode clip|internvl] ...  images as a vision processor sees them
 *                                                  (mmc_image.c)
 *   mmc video FILE|DATA.json [--frames N] ...      video files sampled as a model sees them
 *                                                  (mmc_video.c)
 *   mmc --list-passes | --list-ops | --version     the reference lists (mmc_lists.c)
 * Exit status: 0 ok, 1 user error (diagnostics printed), 2 usage error. */
#include <errno.h>
#include <json-c/json.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "codegen/cg.h"
#include "tools/mmc_import.h"
#include "frontend/sema.h"
#include "ir/ir.h"
#include "passes/accum.h"
#include "passes/actmem.h"
#include "passes/bucket.h"
#include "passes/memplan.h"
#include "mmc_predict.h"
#include "passes/pass.h"
#include "passes/pp_stage.h"
#include "mmrt_data.h"
#include "mmrt_main.h"
#include "tools/mmc_data.h"
#include "tools/mmc_frozen.h"
#include "tools/mmc_hzero.h"
#include "tools/mmc_lists.h"
#include "tools/mmc_subplans.h"
#include "mmrt_tok.h"
#include "tools/mmc_tokenize.h"

enum { EXIT_OK = 0, EXIT_USER = 1, EXIT_USAGE = 2 };

typedef struct Cmd {
  const char *name, *args, *help;
} Cmd;

static const Cmd cmds[] = {
    {"check", "FILE.mm [-I DIR]... [--model NAME --init-from [PREFIX=]HF_DIR]",
     "Parses FILE.mm and its imports, resolves names and checks every model's shapes and parallel "
     "plan.\n"
     "      --init-from: every parameter (under PREFIX, default the architecture's instance) has a "
     "tensor\n"
     "      of the right shape in the Hugging Face directory and every tensor is used (headers "
     "only)."},
    {"import", "HF_DIR [-o FILE.mm]",
     "Writes a .mm file declaring the model of a Hugging Face directory (config.json, "
     "safetensors) with\n"
     "      the stdlib and its hyper-parameters, and checks the tensors' headers against it "
     "(runtime/io/mmrt_hf_map.def)."},
    {"dump-ir",
     "FILE.mm|FILE.mmir [--model NAME] [--after PASS|all] [--format text|dot] [--rank R]",
     "Prints the IR of a model (--model: needed when the file declares several) after a pass "
     "(default: the last).\n"
     "      Given IR text (.mmir), parses, verifies and prints it again (with --after, after the "
     "passes\n"
     "      not yet run on it, up to PASS). --rank R prints what rank R runs."},
    {"opt", "FILE.mmir --passes PASS,PASS,...",
     "Parses IR text, runs the named passes on it in the order given and prints the result. The "
     "module\n"
     "      carries its settings (plan, train) and the passes that have run; a pass runs only "
     "after the\n"
     "      ones it needs and never after a later pass of the pipeline."},
    {"stats", "FILE.mm --model NAME [--json]",
     "Prints the parameters per module and in total, and the forward FLOPs for the declared input "
     "sizes."},
    {"plan",
     "FILE.mm --model NAME [--detail | --json] [--no-fuse] [--timeline FILE.svg]\n"
     "               [--device NAME|FILE.dev [--devices N [--search]]]",
     "Prints the static memory plan: the bytes of each arena (param, grad, opt, act, input), the "
     "peak\n"
     "      (everything the trainer allocates before its first step), the data set a trainer "
     "holds beside\n"
     "      it (trainer = peak + data, what the trainer's measured peak is compared with), a "
     "breakdown per function,\n"
     "      the collectives of a step and a pipeline's bubble: a summary that fits a screen; "
     "--detail adds\n"
     "      the per-layer table, each gradient bucket, each rank's pipeline actions and what "
     "holds its peak.\n"
     "      --device adds the step time predicted on that device (a name in devices/ or a file "
     "mmc\n"
     "      calibrate wrote), its breakdown, throughput, MFU and each rank's memory against the "
     "device's;\n"
     "      --devices N sets dp = N / (tp * cp * pp); --search ranks the plans for N devices "
     "by their\n"
     "      predicted step (the plan flags given fix theirs) and prints the best as parallel "
     "sections. docs/planner.md."},
    {"compile",
     "FILE.mm --model NAME [-o OUT] [--emit exe|obj|llvm|asm|ir] [-O0|-O1|-O2|-O3] [--no-fuse] "
     "[-v]\n"
     "               [--device NAME|FILE.dev] [--tile-buckets K1,K2,...]",
     "Compiles a model into a training executable (default ./trainer): the step functions as LLVM "
     "code\n"
     "      linked with the runtime. --emit ir prints the final mmc IR, llvm the optimised LLVM "
     "IR.\n"
     "      --tile-buckets adds the model at those smaller values of its let K (tiles a sample), "
     "the\n"
     "      trainer running each step at the smallest that holds its tiles "
     "(docs/conversations.md)."},
    {"tokenize",
     "TOKENIZER.json [FILE] [--decode] [--add-special] [--skip-special] [--no-truncation] "
     "[--no-padding] [--chat FAMILY]",
     "Encodes each line of FILE (default: stdin) with a Hugging Face tokenizer.json into a line "
     "of\n"
     "      space-separated token ids, or with --decode each line of ids into text."},
    {"data",
     "preprocess --input FILE.jsonl --tokenizer FILE.json --output-prefix P [--json-key KEY]\n"
     "               [--append-eod] [--workers N] [--bad-samples fail|skip] | inspect PREFIX "
     "[--show N|all]\n"
     "               | conv FILE --tokenizer T.json --chat FAMILY [--images DIR] [--image-tokens N "
     "|\n"
     "               --tiles-from-images [--tile N] [--max-tiles K] [--tokens-per-tile N]] "
     "[--seq-len T]",
     "preprocess: tokenizes the text of each JSONL line into Megatron's indexed dataset\n"
     "      P_KEY_document.bin/.idx (named as Megatron-LM's preprocess_data.py names it); "
     "inspect: its\n"
     "      counts (sequences, documents, tokens, dtype), with --show the first N sequences' ids;\n"
     "      conv: a LLaVA/InternVL conversation dataset's samples as ids and label masks."},
    {"image",
     "FILE... [--mode clip|internvl|none] [--size N] [--max-tiles K] [--mean a,b,c] [--std a,b,c]\n"
     "               [--max-pixels N] [--out FILE.f32]",
     "Decodes JPEG, PNG and WebP files to RGB and preprocesses them as CLIP/LLaVA's or "
     "InternVL2's\n"
     "      processor does; prints each file's size, EXIF orientation and tile grid, and with "
     "--out\n"
     "      writes the normalised pixels as raw float32."},
    {"calibrate", "[-o FILE.dev] [--quick]",
     "Measures this machine (oneDNN matmul in fp32 and bf16 through the runtime's kernels, "
     "memory\n"
     "      bandwidth, the time of one small op; under mpirun with more than one rank, the MPI\n"
     "      collectives' latency and bandwidth) and writes a device description for mmc plan "
     "--device\n"
     "      (stdout without -o). docs/planner.md."},
    {"video",
     "FILE|DATA.json... [--frames N] [--fps F] [--size HxW | --buckets HxW,HxW...]\n"
     "               [--max-pixels N] [--out FILE.f32] [--png-strip FILE.png]",
     "Decodes MP4/MOV and WebM/MKV videos (or those an OpenSoraPlan data JSON lists), samples\n"
     "      N frames at F fps, crops and resizes them; prints each video's container, codec,\n"
     "      duration, fps, size, frame indices and bucket, and writes the frames as float32."},
};

static const char *common_opts =
    "Options for a .mm source (every command but opt):\n"
    "  -I DIR             add DIR to the import search path (after the file's own folder)\n"
    "  --model NAME       the model (or a module whose hyper-parameters all have defaults)\n"
    "  --set NAME=VALUE   override a model-level let or hyper-parameter (e.g. --set B=8)\n"
    "  --max-source-mb N  refuse a source file (or import) larger than N MiB (default 64)\n"
    "  -h, --help         this help\n";

/* ---- the settings' flags (ir/settings.def's rows with a FLAG) ---- */

/* The flag's argument as --help shows it: N, X or the names. */
static const char *flag_arg(const MmSetDesc *d, char *buf, size_t n) {
  if (d->id == MM_SET_RECOMPUTE) return "none|selective|full|block:N";
  if (d->kind == IR_SK_INT) return "N";
  if (d->kind == IR_SK_FLOAT) return "X";
  if (d->kind != IR_SK_ENUM) return "";
  size_t len = 0;
  buf[0] = 0;
  for (int i = 0; d->names[i]; i++)
    len += (size_t)snprintf(buf + len, len < n ? n - len : 0, "%s%s", i ? "|" : "", d->names[i]);
  return buf;
}

/* A BOOL row's flag sets true; --no-<x> sets false unless the flag is one. */
static bool has_no_flag(const MmSetDesc *d) {
  return d->kind == IR_SK_BOOL && strncmp(d->flag, "--no-", 5) != 0;
}

/* The parallel-section overrides: for the commands that check or apply a
 * plan (not stats, which counts the whole model). */
static void print_plan_opts(FILE *out) {
  fprintf(out, "Parallel plan (override the model's settings; not for stats; mmc "
               "--list-settings lists them all):\n");
  for (int i = 0; i < MM_SET_COUNT; i++) {
    const MmSetDesc *d = &mm_settings[i];
    if (!d->flag[0]) continue;
    char buf[96], names[64];
    const char *arg = flag_arg(d, names, sizeof names);
    if (has_no_flag(d))
      snprintf(buf, sizeof buf, "%s, --no-%s", d->flag, d->flag + 2);
    else
      snprintf(buf, sizeof buf, "%s%s%s", d->flag, arg[0] ? " " : "", arg);
    if (strlen(buf) <= 18)
      fprintf(out, "  %-18s %s\n", buf, d->help);
    else
      fprintf(out, "  %s\n  %-18s %s\n", buf, "", d->help);
  }
}

/* mmc --list-settings: settings.def as a table. */
static void list_settings(FILE *out) {
  static const char *const kinds[] = {"int",    "bool", "number", "enum",  "list",
                                      "stages", "loc",  "group",  "string"};
  static const char *const owners[] = {"parallel", "module", "train", "lora",
                                       "gan",      "module", "data"};
  fprintf(out, "%-16s %-9s %-14s %-16s %-28s %-12s %s\n", "setting", "section", "key", "flag",
          "type/values", "default", "help");
  for (int i = 0; i < MM_SET_COUNT; i++) {
    const MmSetDesc *d = &mm_settings[i];
    char type[96], def[32], names[64];
    if (d->kind == IR_SK_ENUM)
      snprintf(type, sizeof type, "%s", flag_arg(d, names, sizeof names));
    else if (d->kind == IR_SK_INT || d->kind == IR_SK_FLOAT)
      snprintf(type, sizeof type, "%s %.15g..%.15g", kinds[d->kind], d->lo, d->hi);
    else
      snprintf(type, sizeof type, "%s", kinds[d->kind]);
    if (d->kind == IR_SK_ENUM)
      snprintf(def, sizeof def, "%s", d->names[(int)d->def]);
    else if (d->kind == IR_SK_BOOL)
      snprintf(def, sizeof def, "%s", d->def != 0 ? "true" : "false");
    else if (d->kind == IR_SK_INT || d->kind == IR_SK_FLOAT)
      snprintf(def, sizeof def, "%.15g", d->def);
    else
      snprintf(def, sizeof def, "-");
    fprintf(out, "%-16s %-9s %-14s %-16s %-28s %-12s %s\n", d->name, owners[d->owner],
            d->key[0] ? d->key : "-", d->flag[0] ? d->flag : "-", type, def, d->help);
  }
}

/* opt reads IR text only, which carries its own settings. */
static bool takes_source(const Cmd *c) {
  return strcmp(c->name, "opt") != 0 && strcmp(c->name, "tokenize") != 0 &&
         strcmp(c->name, "data") != 0 && strcmp(c->name, "import") != 0 &&
         strcmp(c->name, "image") != 0 && strcmp(c->name, "video") != 0;
}

static bool takes_plan(const Cmd *c) {
  return strcmp(c->name, "stats") != 0 && takes_source(c);
}

static void usage_all(FILE *out) {
  fprintf(out, "usage: mmc <command> [options]\n\ncommands:\n");
  for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
    fprintf(out, "  mmc %-8s %s\n      %s\n", cmds[i].name, cmds[i].args, cmds[i].help);
  fprintf(out, "\n%s", common_opts);
  print_plan_opts(out);
  fprintf(out, "\nReference lists (`mmc FLAG` alone; the docs quote them, tests/docs_sync.sh):\n"
               "  --list-passes      the pass pipeline in order, each pass's purpose\n"
               "  --list-ops         every IR op: inputs, outputs, its builtin form in .mm\n"
               "  --list-settings    every train and parallel setting: key, flag, values, default\n"
               "  --version          the version (and `git describe` of the build)\n");
}

static void usage_cmd(FILE *out, const Cmd *c) {
  fprintf(out, "usage: mmc %s %s\n\n%s\n\n%s", c->name, c->args, c->help,
          takes_source(c)           ? common_opts
          : !strcmp(c->name, "opt") ? "Options:\n  --max-source-mb N  refuse IR text larger than N "
                                      "MiB (default 64)\n  -h, --help         this help\n"
                                    : "Options:\n  -h, --help         this help\n");
  if (takes_plan(c)) print_plan_opts(out);
  if (strcmp(c->name, "dump-ir") == 0 || strcmp(c->name, "plan") == 0 ||
      strcmp(c->name, "compile") == 0)
    fprintf(out,
            "  --task KIND        train (default), or generate or eval: add @prefill and\n"
            "                     @decode for a generating trainer (one rank, no plan flags),\n"
            "                     or reconstruct: a video autoencoder's reconstruction\n"
            "                     executable (@encode, @decode, @encode_first, @encode_next),\n"
            "                     or sample: a text-to-video sampler (@denoise, @table, @decode)\n"
            "                     or extract: the feature extractor of a model with forwards\n"
            "                     latents and text_features (its frozen encoders, run once\n"
            "                     over the training clips, for the trainer to read)\n"
            "  --chunk-frames N   reconstruct: the frames of each chunk after the first (the\n"
            "                     first has 1 + N) of the chunked encoder (default 4)\n");
  if (strcmp(c->name, "dump-ir") == 0) {
    fprintf(out, "  --after PASS|all   passes: lower");
    for (int i = 0; i < pass_count; i++) fprintf(out, ", %s", pass_list[i].name);
    fprintf(out,
            "\n  --format text|dot  text IR (default) or Graphviz grouped by module\n"
            "  --rank R           one rank's program: local shapes, its mesh coordinates and the "
            "ranks\n"
            "                     of each collective's group (rank = (dp * cp + cp) * tp + tp)\n");
  }
  if (strcmp(c->name, "opt") == 0) {
    fprintf(out, "  --passes LIST      comma-separated, from:");
    for (int i = 0; i < pass_count; i++)
      fprintf(out, "%s %s (needs: %s)", i ? "," : "", pass_list[i].name,
              *pass_list[i].requires ? pass_list[i].requires : "-");
    fprintf(out, "\n");
  }
  if (strcmp(c->name, "stats") == 0 || strcmp(c->name, "plan") == 0)
    fprintf(out, "  --json             machine-readable output%s\n",
            strcmp(c->name, "plan") == 0 ? " (everything --detail prints)" : "");
  if (strcmp(c->name, "plan") == 0)
    fprintf(out,
            "  --detail           the long form: per layer, per bucket, per rank, per norm and\n"
            "                     attention (the default is a summary that fits a screen)\n");
  if (strcmp(c->name, "plan") == 0 || strcmp(c->name, "compile") == 0)
    fprintf(out, "  --no-fuse          keep every elementwise op on its own (no fused loops)\n");
  if (strcmp(c->name, "compile") == 0)
    fprintf(out,
            "  -o FILE            the output (default: trainer, trainer.o, or stdout for text)\n"
            "  --emit KIND        exe (default), obj, llvm, asm or ir\n"
            "  -O0 .. -O3         LLVM optimisation level (default -O3)\n"
            "  -v                 print the link command\n"
            "The runtime library, its libraries and the compiler driver can be overridden with\n"
            "$MMC_RUNTIME_LIB, $MMC_RUNTIME_LIBS and $MMC_CC.\n");
}

typedef struct Opts {
  const Cmd *cmd;
  const char *file, *model, *after, *format, *timeline;
  const char *passes;        /* opt --passes */
  const char *src_flag;      /* the first option that only means something for a .mm source */
  bool json, detail;         /* plan --detail: the long text form */
  int rank;                  /* dump-ir --rank: >= 0 */
  const char *output, *emit; /* compile, import */
  const char *init_from;     /* check --init-from */
  int opt_level;
  bool opt_set, no_fuse, verbose;
  int task;          /* MMRT_TASK_*: train (default), generate, eval, reconstruct, sample */
  int chunk_frames;  /* reconstruct: frames of a next chunk (0: not given, 4) */
  int max_source_mb; /* --max-source-mb: the most a source file may hold (0: 64 MiB) */
  const char *incdirs[64];
  int nincdirs;
  FeOverride overrides[64];
  int noverrides;
  MmPlanFlags flags;
  const char *plan_flag;    /* the first parallel-plan flag given (NULL: none) */
  const char *device;       /* plan, compile --device: a description (support/device.h) */
  int devices;              /* plan --devices N (0: not given) */
  bool search;              /* plan --search: rank the plans (tools/mmc_predict.h) */
  const char *tile_buckets; /* compile --tile-buckets K1,K2,...: smaller values of K */
} Opts;

/* The programs a trainer can be compiled as (runtime/model/mmrt_programs.def). */
static const char *const task_names[] = {
#define MMRT_PROGRAM(id, name, who, steps, any_world, main, parse) [MMRT_TASK_##id] = name,
#include "mmrt_programs.def"
#undef MMRT_PROGRAM
};
enum { NTASKS = sizeof task_names / sizeof task_names[0] };

/* The task named `name` (MMRT_TASK_*), or -1. */
static int task_of(const char *name) {
  for (int t = 0; t < NTASKS; t++)
    if (!strcmp(task_names[t], name)) return t;
  return -1;
}

/* "a, b, c or d": the tasks' names from task `from` on. */
static const char *task_list(int from) {
  static char buf[256];
  buf[0] = 0;
  for (int t = from; t < NTASKS; t++)
    snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "%s%s",
             t == from         ? ""
             : t + 1 == NTASKS ? " or "
                               : ", ",
             task_names[t]);
  return buf;
}

static int bad_usage(const Cmd *c, const char *fmt, const char *arg) {
  fprintf(stderr, "mmc: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n");
  usage_cmd(stderr, c);
  return EXIT_USAGE;
}

static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && strcmp(s + n - k, suffix) == 0;
}

static bool parse_int(const char *s, int lo, int hi, int *out) {
  char *end;
  long v = strtol(s, &end, 10);
  if (!*s || *end || v < lo || v > hi) return false;
  *out = (int)v;
  return true;
}

/* The row whose flag a is (or --no-<x> of a BOOL row), else NULL. */
static const MmSetDesc *flag_row(const char *a, bool *off) {
  for (int i = 0; i < MM_SET_COUNT; i++) {
    const MmSetDesc *d = &mm_settings[i];
    if (!d->flag[0]) continue;
    *off = false;
    if (strcmp(a, d->flag) == 0) return d;
    *off = true;
    if (has_no_flag(d) && strncmp(a, "--no-", 5) == 0 && strcmp(a + 5, d->flag + 2) == 0) return d;
  }
  return NULL;
}

static bool is_plan_flag(const char *a) {
  bool off;
  return flag_row(a, &off) != NULL;
}

/* A setting's flag (flag_row): its value into o->flags; -1, else an exit code. */
static int parse_setting_flag(Opts *o, const MmSetDesc *d, bool off, const char *a,
                              const char *next) {
  MmPlanFlags *f = &o->flags;
  void *base = mm_setting_base(d, &f->plan, &f->train);
  char list[128];
  f->given[d->id] = true;
  if (d->kind == IR_SK_BOOL) {
    mm_setting_put(d, base, !off);
    return -1;
  }
  if (!next) return bad_usage(o->cmd, "option '%s' needs a value", a);
  if (d->id == MM_SET_RECOMPUTE) {
    MmRecompute pol;
    if (!mm_recompute_parse(next, &pol, &f->plan.recompute_block))
      return bad_usage(
          o->cmd, "--recompute takes none, selective, full or block:N (N >= 1), not '%s'", next);
    f->plan.recompute = pol;
  } else if (d->kind == IR_SK_ENUM) {
    int k = mm_enum_index(d->names, next);
    if (k < 0) {
      fprintf(stderr, "mmc: %s takes %s, not '%s'\n", a, mm_enum_list(d->names, list, sizeof list),
              next);
      usage_cmd(stderr, o->cmd);
      return EXIT_USAGE;
    }
    mm_setting_put(d, base, k);
  } else if (d->kind == IR_SK_INT) {
    int v;
    if (!parse_int(next, (int)d->lo, (int)d->hi, &v)) {
      fprintf(stderr, "mmc: %s takes a whole number from %d to %d, not '%s'\n", a, (int)d->lo,
              (int)d->hi, next);
      usage_cmd(stderr, o->cmd);
      return EXIT_USAGE;
    }
    mm_setting_put(d, base, v);
  } else {
    char *end;
    double v = strtod(next, &end);
    if (!*next || *end || !(v >= d->lo && v <= d->hi)) {
      fprintf(stderr, "mmc: %s takes a number from %.15g to %.15g%s, not '%s'\n", a, d->lo, d->hi,
              d->what, next);
      usage_cmd(stderr, o->cmd);
      return EXIT_USAGE;
    }
    mm_setting_put(d, base, v);
  }
  return -2; /* took next */
}

/* Returns -1 on success, else an exit code. */
static int parse_opts(int argc, char **argv, Opts *o) {
  mm_plan_flags_init(&o->flags);
  o->rank = -1;
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i];
    const char *next = i + 1 < argc ? argv[i + 1] : NULL;
    /* --precision also acts on one rank (the generator's and evaluator's
     * products in bf16, as the trainer's) */
    bool off;
    const MmSetDesc *row = flag_row(a, &off);
    if (row && !o->plan_flag && row->owner == MM_OWN_PLAN) o->plan_flag = a;
    /* what the source-only options below change, to refuse them on IR text */
    MmPlanFlags flags_before;
    memcpy(&flags_before, &o->flags, sizeof flags_before);
    int src_state = o->nincdirs + o->noverrides + (o->model != NULL) + o->task;
#define NEED_ARG()                                                                                 \
  do {                                                                                             \
    if (!next) return bad_usage(o->cmd, "option '%s' needs a value", a);                           \
    i++;                                                                                           \
  } while (0)
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      usage_cmd(stdout, o->cmd);
      return EXIT_OK;
    } else if (strcmp(a, "--list-settings") == 0 && takes_plan(o->cmd)) {
      list_settings(stdout); /* as --help: the table, nothing else */
      return EXIT_OK;
    } else if (strcmp(a, "-I") == 0) {
      NEED_ARG();
      if (o->nincdirs == 64) return bad_usage(o->cmd, "too many -I folders%s", "");
      o->incdirs[o->nincdirs++] = next;
    } else if (strncmp(a, "-I", 2) == 0 && a[2]) {
      if (o->nincdirs == 64) return bad_usage(o->cmd, "too many -I folders%s", "");
      o->incdirs[o->nincdirs++] = a + 2;
    } else if (strcmp(a, "--max-source-mb") == 0 && strcmp(o->cmd->name, "import") != 0) {
      NEED_ARG();
      if (!parse_int(next, 1, 1 << 20, &o->max_source_mb))
        return bad_usage(o->cmd, "--max-source-mb takes a size in MiB from 1 to 1048576, not '%s'",
                         next);
    } else if (strcmp(a, "--model") == 0) {
      NEED_ARG();
      o->model = next;
    } else if (strcmp(a, "--after") == 0 && strcmp(o->cmd->name, "dump-ir") == 0) {
      NEED_ARG();
      if (strcmp(next, "all") != 0 && !pass_exists(next))
        return bad_usage(o->cmd, "unknown pass '%s'", next);
      o->after = next;
    } else if (strcmp(a, "--passes") == 0 && strcmp(o->cmd->name, "opt") == 0) {
      NEED_ARG();
      o->passes = next;
    } else if (strcmp(a, "--rank") == 0 && strcmp(o->cmd->name, "dump-ir") == 0) {
      NEED_ARG();
      if (!parse_int(next, 0, 1 << 20, &o->rank))
        return bad_usage(o->cmd, "--rank takes a rank number, not '%s'", next);
    } else if (strcmp(a, "--format") == 0 && strcmp(o->cmd->name, "dump-ir") == 0) {
      NEED_ARG();
      if (strcmp(next, "text") != 0 && strcmp(next, "dot") != 0)
        return bad_usage(o->cmd, "--format takes text or dot, not '%s'", next);
      o->format = next;
    } else if (strcmp(a, "--detail") == 0 && strcmp(o->cmd->name, "plan") == 0) {
      o->detail = true;
    } else if (strcmp(a, "--json") == 0 &&
               (strcmp(o->cmd->name, "stats") == 0 || strcmp(o->cmd->name, "plan") == 0)) {
      o->json = true;
    } else if (strcmp(a, "--task") == 0 && strcmp(o->cmd->name, "check") != 0 &&
               strcmp(o->cmd->name, "stats") != 0) {
      NEED_ARG();
      o->task = task_of(next);
      if (o->task < 0) {
        char msg[256];
        snprintf(msg, sizeof msg, "--task takes %s, not '%%s'", task_list(0));
        return bad_usage(o->cmd, msg, next);
      }
    } else if (strcmp(a, "--chunk-frames") == 0 && strcmp(o->cmd->name, "check") != 0 &&
               strcmp(o->cmd->name, "stats") != 0) {
      NEED_ARG();
      if (!parse_int(next, 1, 1 << 16, &o->chunk_frames))
        return bad_usage(o->cmd, "--chunk-frames takes a count of frames >= 1, not '%s'", next);
    } else if (strcmp(a, "--device") == 0 &&
               (strcmp(o->cmd->name, "plan") == 0 || strcmp(o->cmd->name, "compile") == 0)) {
      NEED_ARG();
      o->device = next;
    } else if (strcmp(a, "--tile-buckets") == 0 && strcmp(o->cmd->name, "compile") == 0) {
      NEED_ARG();
      o->tile_buckets = next;
    } else if (strcmp(a, "--search") == 0 && strcmp(o->cmd->name, "plan") == 0) {
      o->search = true;
    } else if (strcmp(a, "--devices") == 0 && strcmp(o->cmd->name, "plan") == 0) {
      NEED_ARG();
      if (!parse_int(next, 1, 1 << 24, &o->devices))
        return bad_usage(o->cmd, "--devices takes a count of devices >= 1, not '%s'", next);
    } else if (strcmp(a, "--timeline") == 0 && strcmp(o->cmd->name, "plan") == 0) {
      NEED_ARG();
      o->timeline = next;
    } else if (strcmp(a, "--no-fuse") == 0 &&
               (strcmp(o->cmd->name, "plan") == 0 || strcmp(o->cmd->name, "compile") == 0)) {
      o->no_fuse = true;
    } else if (strcmp(a, "--init-from") == 0 && strcmp(o->cmd->name, "check") == 0) {
      NEED_ARG();
      o->init_from = next;
    } else if (strcmp(a, "-o") == 0 && strcmp(o->cmd->name, "import") == 0) {
      NEED_ARG();
      o->output = next;
    } else if (strcmp(a, "-o") == 0 && strcmp(o->cmd->name, "compile") == 0) {
      NEED_ARG();
      o->output = next;
    } else if (strcmp(a, "--emit") == 0 && strcmp(o->cmd->name, "compile") == 0) {
      NEED_ARG();
      if (strcmp(next, "exe") && strcmp(next, "obj") && strcmp(next, "llvm") &&
          strcmp(next, "asm") && strcmp(next, "ir"))
        return bad_usage(o->cmd, "--emit takes exe, obj, llvm, asm or ir, not '%s'", next);
      o->emit = next;
    } else if (strncmp(a, "-O", 2) == 0 && strcmp(o->cmd->name, "compile") == 0) {
      if (!parse_int(a + 2, 0, 3, &o->opt_level))
        return bad_usage(o->cmd, "unknown optimisation level '%s' (-O0 to -O3)", a);
      o->opt_set = true;
    } else if (strcmp(a, "-v") == 0 && strcmp(o->cmd->name, "compile") == 0) {
      o->verbose = true;
    } else if (strcmp(a, "--set") == 0) {
      NEED_ARG();
      const char *eq = strchr(next, '=');
      if (!eq || eq == next || !eq[1])
        return bad_usage(o->cmd, "--set takes NAME=VALUE, not '%s'", next);
      if (o->noverrides == 64) return bad_usage(o->cmd, "too many --set options%s", "");
      for (int k = 0; k < o->noverrides; k++)
        if (strlen(o->overrides[k].name) == (size_t)(eq - next) &&
            strncmp(o->overrides[k].name, next, (size_t)(eq - next)) == 0) {
          fprintf(stderr, "mmc: error: --set %s given twice (%s=%s and %s)\n", o->overrides[k].name,
                  o->overrides[k].name, o->overrides[k].value, next);
          return EXIT_USAGE;
        }
      o->overrides[o->noverrides].name = strndup(next, (size_t)(eq - next));
      o->overrides[o->noverrides].value = eq + 1;
      o->noverrides++;
    } else if (is_plan_flag(a) && !takes_plan(o->cmd)) {
      return bad_usage(o->cmd,
                       "%s does not go with stats: stats counts the whole model (mmc plan shows "
                       "what one rank holds)",
                       a);
    } else if (row) {
      int rc = parse_setting_flag(o, row, off, a, next);
      if (rc == -2)
        i++;
      else if (rc != -1)
        return rc;
    } else if (a[0] == '-' && a[1]) {
      return bad_usage(o->cmd, "unknown option '%s'", a);
    } else if (!o->file) {
      o->file = a;
    } else {
      return bad_usage(o->cmd, "unexpected argument '%s' (one .mm file per run)", a);
    }
#undef NEED_ARG
    if (!o->src_flag && (memcmp(&flags_before, &o->flags, sizeof flags_before) != 0 ||
                         src_state != o->nincdirs + o->noverrides + (o->model != NULL) + o->task ||
                         strcmp(a, "--task") == 0 || strcmp(a, "--chunk-frames") == 0))
      o->src_flag = a;
  }
  if (!o->file) return bad_usage(o->cmd, "no input file%s", "");
  if (o->init_from && !o->model)
    return bad_usage(o->cmd, "--init-from checks one model: give --model NAME%s", "");
  if (o->src_flag && ends_with(o->file, ".mmir")) {
    fprintf(stderr,
            "mmc: error: %s applies to a .mm source; IR text carries its own settings (the "
            "plan(...) and train(...) lines of '%s'): edit those instead\n",
            o->src_flag, o->file);
    return EXIT_USAGE;
  }
  /* combinations in which a flag would do nothing */
  if (o->plan_flag && o->task != MMRT_TASK_TRAIN) {
    char msg[256];
    snprintf(msg, sizeof msg, "%%s does not go with --task %s: they run on one rank", task_list(1));
    return bad_usage(o->cmd, msg, o->plan_flag);
  }
  if (o->devices && !o->device)
    return bad_usage(o->cmd, "--devices counts devices of a --device: give --device too%s", "");
  if (o->search && (!o->devices || o->json || o->detail || o->timeline))
    return bad_usage(
        o->cmd, "--search ranks plans for --device D --devices N (and prints text only)%s", "");
  if (o->detail && o->json)
    return bad_usage(o->cmd, "--detail is the long text form; --json holds everything already%s",
                     "");
  if (o->chunk_frames && o->task != MMRT_TASK_RECONSTRUCT)
    return bad_usage(o->cmd, "--chunk-frames goes with --task reconstruct only%s", "");
  const char *emit = o->emit ? o->emit : "exe";
  if (o->verbose && strcmp(emit, "exe") != 0)
    return bad_usage(o->cmd, "-v prints the link command; --emit %s links nothing", emit);
  if (o->opt_set && strcmp(emit, "ir") == 0)
    return bad_usage(o->cmd, "-O sets LLVM's optimisation; --emit %s prints mmc IR before LLVM",
                     emit);
  if (o->rank >= 0 && o->format && strcmp(o->format, "dot") == 0)
    return bad_usage(o->cmd, "--rank prints the text form; it does not go with --format %s",
                     o->format);
  return -1;
}

static void diag_start(Diag *d, const Opts *o) {
  diag_init(d);
  if (o->max_source_mb) d->max_source = (size_t)o->max_source_mb << 20;
}

/* The data section's tokenizer check (FeOptions.tok_vocab). */
static int64_t tok_vocab(const char *path, char *err, size_t errn) {
  MmrtTok *t = mmrt_tok_load(path, err, errn);
  if (!t) return -1;
  int64_t n = mmrt_tok_vocab_size(t);
  mmrt_tok_free(t);
  return n;
}

static FeProgram *load(Opts *o, Diag *d) {
  FeOptions fo = {0};
  fo.incdirs = o->incdirs;
  fo.nincdirs = o->nincdirs;
  fo.overrides = o->overrides;
  fo.noverrides = o->noverrides;
  fo.flags = o->flags;
  fo.tp_splits = shard_tp_splits;
  fo.tok_vocab = tok_vocab;
  return fe_load(d, o->file, &fo);
}

/* ---- output files ----
 * Checked once the sources are loaded and before anything is compiled: an
 * output is never one of the input files (the same device and inode: the
 * source or an import), never an existing non-regular file (/dev/null is
 * refused, not replaced), and its folder is writable. Written to a fresh
 * file beside it, renamed over it once complete. */

static bool output_ok(const char *flag, const char *path, Diag *d) {
  struct stat st;
  if (!*path) {
    fprintf(stderr, "mmc: error: %s takes a file name, not ''\n", flag);
    d->errors++;
    return false;
  }
  if (stat(path, &st) == 0) {
    if (!S_ISREG(st.st_mode)) {
      fprintf(stderr, "mmc: error: %s '%s' is %s: refusing to replace it with the output\n", flag,
              path, diag_file_kind(st.st_mode));
      d->errors++;
      return false;
    }
    for (uint32_t i = 1; i < d->nfiles; i++) {
      struct stat in;
      if (stat(d->files[i]->path, &in) == 0 && in.st_dev == st.st_dev && in.st_ino == st.st_ino) {
        fprintf(stderr, "mmc: error: %s '%s' is the input file '%s': refusing to overwrite it\n",
                flag, path, d->files[i]->path);
        d->errors++;
        return false;
      }
    }
  } else if (errno != ENOENT) {
    fprintf(stderr, "mmc: error: %s '%s': %s\n", flag, path, strerror(errno));
    d->errors++;
    return false;
  }
  char *copy = strdup(path);
  if (!copy) mm_die(__FILE__, __LINE__, "out of memory");
  const char *dir = dirname(copy);
  bool ok = access(dir, W_OK | X_OK) == 0;
  if (!ok) {
    fprintf(stderr, "mmc: error: %s '%s': cannot write in the folder '%s': %s\n", flag, path, dir,
            strerror(errno));
    d->errors++;
  }
  free(copy);
  return ok;
}

/* The file compile writes (NULL: stdout). */
static const char *compile_output(const Opts *o) {
  const char *emit = o->emit ? o->emit : "exe";
  if (o->output) return o->output;
  if (strcmp(emit, "exe") == 0) return "trainer";
  if (strcmp(emit, "obj") == 0) return "trainer.o";
  return NULL;
}

static bool outputs_ok(const Opts *o, Diag *d) {
  if (strcmp(o->cmd->name, "compile") == 0 && compile_output(o))
    return output_ok(o->output ? "-o" : "the default output", compile_output(o), d);
  if (o->timeline) return output_ok("--timeline", o->timeline, d);
  return true;
}

/* A fresh file beside path (same folder, so that rename replaces path),
 * with the mode a new file gets; NULL after a message. Free the name. */
static char *tmp_beside(const char *path, Diag *d) {
  size_t n = strlen(path) + 16;
  char *t = malloc(n);
  if (!t) mm_die(__FILE__, __LINE__, "out of memory");
  snprintf(t, n, "%s.tmpXXXXXX", path);
  int fd = mkstemp(t);
  if (fd < 0) {
    fprintf(stderr, "mmc: error: cannot create a file beside '%s': %s\n", path, strerror(errno));
    d->errors++;
    free(t);
    return NULL;
  }
  mode_t um = umask(0);
  umask(um);
  int rc = fchmod(fd, 0666 & ~um); /* mkstemp made it 0600; on failure it stays so */
  (void)rc;
  close(fd);
  return t;
}

/* Renames tmp over path when ok, else removes tmp; frees tmp. */
static bool finish_tmp(char *tmp, const char *path, bool ok, Diag *d) {
  if (ok && rename(tmp, path) != 0) {
    fprintf(stderr, "mmc: error: cannot write '%s': %s\n", path, strerror(errno));
    d->errors++;
    ok = false;
  }
  if (!ok) unlink(tmp);
  free(tmp);
  return ok;
}

static const char *pick_model(FeProgram *p, Opts *o, Diag *d) {
  if (o->model) {
    if (!fe_has_decl(p, o->model, NULL)) {
      fprintf(stderr, "mmc: error: '%s' declares no model or module named '%s'", o->file, o->model);
      int n = fe_model_count(p);
      if (n) {
        fprintf(stderr, " (models:");
        for (int i = 0; i < n; i++) fprintf(stderr, " %s", fe_model_name(p, i));
        fprintf(stderr, ")");
      }
      fprintf(stderr, "\n");
      d->errors++;
      return NULL;
    }
    return o->model;
  }
  if (fe_model_count(p) == 0) {
    fprintf(stderr, "mmc: error: '%s' declares no model; name a module with --model NAME\n",
            o->file);
    d->errors++;
    return NULL;
  }
  if (fe_model_count(p) > 1) {
    fprintf(stderr,
            "mmc: error: '%s' declares %d models; name one with --model NAME (models:", o->file,
            fe_model_count(p));
    for (int i = 0; i < fe_model_count(p); i++) fprintf(stderr, " %s", fe_model_name(p, i));
    fprintf(stderr, ")\n");
    d->errors++;
    return NULL;
  }
  return fe_model_name(p, 0);
}

static int cmd_check(Opts *o) {
  Diag d;
  diag_start(&d, o);
  FeProgram *p = load(o, &d);
  int rc = EXIT_USER;
  if (p) {
    if (o->model) {
      FeResult r;
      if (pick_model(p, o, &d) && fe_elaborate(p, o->model, &r)) rc = EXIT_OK;
      if (rc == EXIT_OK && o->init_from && mmc_import_verify(r.ir, o->init_from)) rc = EXIT_USER;
      if (r.ir) ir_module_free(r.ir);
    } else if (fe_check_all(p)) {
      rc = EXIT_OK;
    }
  }
  if (d.errors) {
    fprintf(stderr, "%d error%s generated.\n", d.errors, d.errors == 1 ? "" : "s");
    rc = EXIT_USER;
  }
  fe_free(p);
  diag_free(&d);
  return rc;
}

typedef struct DumpState {
  const char *after;
  bool dot;
  int rank;      /* -1: the whole (global) program */
  bool bad_rank; /* --rank is not a rank of the module's mesh */
} DumpState;

/* The module, or one rank's program of it. */
static bool print_ir(IrModule *m, bool dot, int rank, const char *after) {
  if (rank >= 0 && rank >= ir_world_size(m)) {
    fprintf(stderr,
            "mmc: error: --rank %d is not a rank of the mesh (dp = %d, cp = %d, tp = %d: %d "
            "rank%s)%s\n",
            rank, m->mesh[IR_AX_DP], m->mesh[IR_AX_CP], m->mesh[IR_AX_TP], ir_world_size(m),
            ir_world_size(m) == 1 ? "" : "s",
            ir_world_size(m) == 1 && after ? "; the shard pass sets the mesh" : "");
    return false;
  }
  if (dot)
    ir_print_dot(stdout, m);
  else if (rank >= 0)
    mmc_rank_subplans(stdout, m, rank), ir_print_module_rank(stdout, m, rank);
  else
    ir_print_module(stdout, m);
  return true;
}

static void dump_after(const char *name, IrModule *m, void *user) {
  DumpState *s = user;
  if (strcmp(s->after, "all") == 0) {
    printf("// ----- after %s -----\n", name);
  } else if (strcmp(s->after, name) != 0) {
    return;
  }
  if (!print_ir(m, s->dot, s->rank, name)) s->bad_rank = true;
}

/* An executable that does not train: one rank, no plan, no @train. */
static void one_rank(FeResult *r) {
  MmPlan *pl = &r->plan;
  pl->tp = pl->pp = pl->cp = pl->dp = 1;
  pl->sp = false;
  pl->zero = 0;
  pl->nsubplans = 0;
  pl->stages = NULL;
  pl->nstages = 0;
  ir_module_set_settings(r->ir, pl, NULL);
  r->ir->inference = true;
}

/* The generate and eval tasks: @prefill and @decode next to @forward, on
 * one rank (the parallel section is for training). */
static bool add_decoding(FeProgram *p, const char *model, FeResult *r, Diag *d) {
  MmPlan *pl = &r->plan;
  if (mm_plan_ranks(pl) > 1)
    fprintf(stderr,
            "mmc: note: generation runs on one rank; the plan (tp = %d, pp = %d, cp = %d, dp = %d) "
            "is for "
            "training and is not applied\n",
            pl->tp, pl->pp, pl->cp, pl->dp);
  one_rank(r);
  IrFunc *f = ir_module_func(r->ir, "forward");
  int64_t T = 0;
  for (int i = 0; f && i < f->inputs.len; i++) {
    IrValue *v = f->inputs.items[i];
    if (strcmp(v->name, "text") == 0 && v->shape.rank == 2) T = v->shape.d[1];
  }
  if (!T) {
    diag_error_plain(
        d, "model '%s': generation needs a forward input text: i32[B, T] (the token ids)", model);
    return false;
  }
  return fe_elaborate_cached(p, model, r->ir, "prefill", FE_PREFILL, T) &&
         fe_elaborate_cached(p, model, r->ir, "decode", FE_DECODE, T);
}

/* A video autoencoder's forwards `encode` and `decode` (README
 * "Reconstruction"): the trainer gets @encode and @decode for its PSNR
 * when it runs on one rank; the reconstruct task also the chunked encoder
 * @encode_first (1 + C frames, input chunk0) and @encode_next (C frames,
 * input chunk, and the caches). */
static bool add_reconstruct(Opts *o, FeProgram *p, const char *model, FeResult *r, Diag *d) {
  bool has = fe_has_forward(p, model, "encode") && fe_has_forward(p, model, "decode");
  if (o->task == MMRT_TASK_TRAIN) {
    MmPlan *pl = &r->plan;
    if (!has || mm_plan_ranks(pl) > 1) return true; /* no PSNR: mmrt_feed_video.c */
    return fe_elaborate_named(p, model, r->ir, "encode", "encode", FE_TRAIN, 0, NULL) &&
           fe_elaborate_named(p, model, r->ir, "decode", "decode", FE_TRAIN, 0, NULL);
  }
  if (!has) {
    diag_error_plain(d,
                     "model '%s': --task reconstruct needs forwards named encode (the clips to "
                     "latents) and decode (latents to clips)",
                     model);
    return false;
  }
  MmPlan *pl = &r->plan;
  if (mm_plan_ranks(pl) > 1)
    fprintf(stderr, "mmc: note: reconstruction runs on one rank; the plan is for training\n");
  one_rank(r);
  int64_t C = o->chunk_frames ? o->chunk_frames : 4;
  if (!fe_elaborate_named(p, model, r->ir, "encode", "encode", FE_ENCODE, 0, NULL) ||
      !fe_elaborate_named(p, model, r->ir, "decode", "decode", FE_TRAIN, 0, NULL))
    return false;
  if (fe_elaborate_named(p, model, r->ir, "encode", "encode_first", FE_ENCODE, 1 + C, "chunk0") &&
      fe_elaborate_named(p, model, r->ir, "encode", "encode_next", FE_ENCODE_NEXT, C, "chunk"))
    return true;
  fprintf(stderr,
          "mmc: note: in the chunked encoder: a first chunk of 1 + %lld frames, then chunks of "
          "%lld (--chunk-frames)\n",
          (long long)C, (long long)C);
  return false;
}

/* The text-to-video sampler (README "Sampling"): the model's forwards
 * denoise (noisy latents, the step as a float, caption ids -> the DiT's
 * prediction), table (the schedule, DDPM's ddpm_table) and decode (latents
 * -> clips) as @denoise, @table and @decode, and classify (frames ->
 * logits, optional) as @classify, on one rank. */
static bool add_sample(FeProgram *p, const char *model, FeResult *r, Diag *d) {
  static const char *const fwd[3] = {"denoise", "table", "decode"};
  for (int i = 0; i < 3; i++)
    if (!fe_has_forward(p, model, fwd[i])) {
      diag_error_plain(
          d,
          "model '%s': --task sample needs forwards named denoise(x, t, text) (the "
          "prediction from noisy latents, the step as f32[B] and caption ids), "
          "table() (the schedule: row t sqrt(abar_t), sqrt(1 - abar_t)) and decode(latents) "
          "(to clips); "
          "'%s' is missing",
          model, fwd[i]);
      return false;
    }
  MmPlan *pl = &r->plan;
  if (mm_plan_ranks(pl) > 1)
    fprintf(stderr, "mmc: note: sampling runs on one rank; the plan is for training\n");
  one_rank(r);
  for (int i = 0; i < 3; i++)
    if (!fe_elaborate_named(p, model, r->ir, fwd[i], fwd[i], FE_TRAIN, 0, NULL)) return false;
  /* a frame classifier's forward, when the model has one: the sampler scores its clips */
  return !fe_has_forward(p, model, "classify") ||
         fe_elaborate_named(p, model, r->ir, "classify", "classify", FE_TRAIN, 0, NULL);
}

/* A model's frozen encoders as the forwards `latents` (clips to latents)
 * and `text_features` (caption ids to features), docs/design/t2v.md
 * "Offline features": a one-rank trainer gets @latents and @text_features
 * for its online encoding; the extract task runs them over the training
 * clips. */
static bool add_features(Opts *o, FeProgram *p, const char *model, FeResult *r, Diag *d) {
  bool has = fe_has_forward(p, model, "latents") && fe_has_forward(p, model, "text_features");
  MmPlan *pl = &r->plan;
  if (o->task == MMRT_TASK_TRAIN && (!has || mm_plan_ranks(pl) > 1)) return true;
  if (!has) {
    diag_error_plain(d,
                     "model '%s': --task extract needs forwards named latents (the clips to "
                     "latents) and text_features (the caption ids to text features)",
                     model);
    return false;
  }
  if (o->task == MMRT_TASK_EXTRACT) {
    if (mm_plan_ranks(pl) > 1)
      fprintf(stderr, "mmc: note: feature extraction runs on one rank; the plan is for training\n");
    one_rank(r);
  }
  return fe_elaborate_named(p, model, r->ir, "latents", "latents", FE_TRAIN, 0, NULL) &&
         fe_elaborate_named(p, model, r->ir, "text_features", "text_features", FE_TRAIN, 0, NULL);
}

/* Loads, elaborates and runs the pipeline; returns the module or NULL. */
static IrModule *build(Opts *o, Diag *d, FeProgram **pp, FeResult *r, const char *stop,
                       void (*after)(const char *, IrModule *, void *), void *user) {
  FeProgram *p = load(o, d);
  *pp = p;
  memset(r, 0, sizeof *r);
  if (!p || d->errors || !outputs_ok(o, d)) return NULL;
  const char *model = pick_model(p, o, d);
  if (!model || !fe_elaborate(p, model, r)) return NULL;
  if ((o->task == MMRT_TASK_GENERATE || o->task == MMRT_TASK_EVAL) && !add_decoding(p, model, r, d))
    return NULL;
  if ((o->task == MMRT_TASK_TRAIN || o->task == MMRT_TASK_RECONSTRUCT) &&
      !add_reconstruct(o, p, model, r, d))
    return NULL;
  if (o->task == MMRT_TASK_SAMPLE && !add_sample(p, model, r, d)) return NULL;
  if ((o->task == MMRT_TASK_TRAIN || o->task == MMRT_TASK_EXTRACT) &&
      !add_features(o, p, model, r, d))
    return NULL;
  r->ir->no_fuse = o->no_fuse;
  PassCtx cx = {.d = d};
  if (!pass_run_pipeline(r->ir, &cx, stop, after, user)) return NULL;
  return r->ir;
}

static int finish(Diag *d, FeProgram *p, FeResult *r, int rc) {
  if (d->errors) {
    fprintf(stderr, "%d error%s generated.\n", d->errors, d->errors == 1 ? "" : "s");
    rc = EXIT_USER;
  }
  if (r->ir) ir_module_free(r->ir);
  fe_free(p);
  diag_free(d);
  return rc;
}

/* Reads, parses and verifies IR text; NULL after a message. */
static IrModule *load_ir_text(const char *file, Diag *d) {
  const char *err = NULL;
  uint32_t id = diag_load_file(d, file, &err);
  if (!id) {
    fprintf(stderr, "mmc: error: cannot read '%s': %s\n", file, err);
    d->errors++;
    return NULL;
  }
  IrModule *m = ir_parse(d, id);
  if (m && !ir_verify(m)) {
    ir_module_free(m);
    return NULL;
  }
  return m;
}

static int finish_text(Diag *d, IrModule *m, int rc) {
  if (d->errors) {
    fprintf(stderr, "%d error%s generated.\n", d->errors, d->errors == 1 ? "" : "s");
    rc = EXIT_USER;
  }
  if (m) ir_module_free(m);
  diag_free(d);
  return rc;
}

/* dump-ir on IR text (.mmir): parse, verify, print again; with --after, the
 * pipeline's passes that have not run on it yet, up to that one. */
static int dump_ir_text(Opts *o) {
  Diag d;
  diag_start(&d, o);
  IrModule *m = load_ir_text(o->file, &d);
  bool dot = o->format && strcmp(o->format, "dot") == 0, ok = m != NULL;
  if (ok && o->after) {
    DumpState s = {.after = o->after, .dot = dot, .rank = o->rank};
    PassCtx cx = {.d = &d};
    ok =
        pass_run_pipeline(m, &cx, strcmp(o->after, "all") == 0 ? NULL : o->after, dump_after, &s) &&
        !s.bad_rank;
  } else if (ok) {
    ok = print_ir(m, dot, o->rank, NULL);
  }
  return finish_text(&d, m, ok ? EXIT_OK : EXIT_USER);
}

/* opt: the named passes on IR text, in the order given. */
static int cmd_opt(Opts *o) {
  if (!o->passes) return bad_usage(o->cmd, "opt needs --passes PASS,PASS,...%s", "");
  if (!ends_with(o->file, ".mmir"))
    return bad_usage(o->cmd,
                     "opt reads IR text (FILE.mmir), not '%s'; for a model use dump-ir --after",
                     o->file);
  int order[64], n = 0;
  for (const char *s = o->passes;;) {
    size_t len = strcspn(s, ",");
    char name[64];
    snprintf(name, sizeof name, "%.*s", (int)len, s);
    int i = pass_index(name);
    if (i < 0 || n == 64) {
      fprintf(stderr, "mmc: unknown pass '%s' in --passes (passes:", name);
      for (int k = 0; k < pass_count; k++)
        fprintf(stderr, "%s %s", k ? "," : "", pass_list[k].name);
      fprintf(stderr, ")%s\n", strcmp(name, "lower") == 0 ? "; lower is the frontend" : "");
      return EXIT_USAGE;
    }
    order[n++] = i;
    if (!s[len]) break;
    s += len + 1;
  }
  Diag d;
  diag_start(&d, o);
  IrModule *m = load_ir_text(o->file, &d);
  bool ok = m != NULL;
  PassCtx cx = {.d = &d};
  for (int k = 0; ok && k < n; k++) ok = pass_run(m, &cx, order[k]);
  ok = ok && ir_verify(m);
  if (ok) ir_print_module(stdout, m);
  return finish_text(&d, m, ok ? EXIT_OK : EXIT_USER);
}

static int cmd_dump_ir(Opts *o) {
  if (ends_with(o->file, ".mmir")) return dump_ir_text(o);
  Diag d;
  diag_start(&d, o);
  FeProgram *p;
  FeResult r;
  const char *last = pass_count ? pass_list[pass_count - 1].name : "lower";
  DumpState s = {.after = o->after ? o->after : last,
                 .dot = o->format && strcmp(o->format, "dot") == 0,
                 .rank = o->rank};
  const char *stop = strcmp(s.after, "all") == 0 ? NULL : s.after;
  IrModule *m = build(o, &d, &p, &r, stop, dump_after, &s);
  return finish(&d, p, &r, m && !s.bad_rank ? EXIT_OK : EXIT_USER);
}

/* ---- stats ---- */

typedef struct ModStat {
  char name[256];
  int64_t params, trainable;
} ModStat;

/* Length of the first `depth` components of a parameter name ("gpt" and
 * "gpt.h" for "gpt.h.3.attn.q_proj.weight"; stack layers collapse), or 0 when
 * the name has fewer components. */
static size_t module_prefix(const char *name, int depth) {
  const char *s = name;
  for (int i = 0; i < depth; i++) {
    const char *dot = strchr(s, '.');
    if (i == depth - 1) return dot ? (size_t)(dot - name) : strlen(name);
    if (!dot) return 0;
    s = dot + 1;
  }
  return 0;
}

/* Whether some parameter lies two or more levels below the module named by
 * the first len bytes of name. */
static bool has_submodules(const IrModule *m, const char *name, size_t len) {
  for (int i = 0; i < m->params.len; i++) {
    const char *n = ((IrValue *)m->params.items[i])->name;
    if (strncmp(n, name, len) == 0 && n[len] == '.' && strchr(n + len + 1, '.')) return true;
  }
  return false;
}

static int cmd_stats(Opts *o) {
  Diag d;
  diag_start(&d, o);
  FeProgram *p;
  FeResult r;
  IrModule *m =
      build(o, &d, &p, &r, "lora", NULL, NULL); /* LoRA adapters counted, the base frozen */
  if (!m) return finish(&d, p, &r, EXIT_USER);
  int64_t total = 0, trainable = 0, flops = 0, bytes = 0;
  ModStat *mods = calloc((size_t)m->params.len * 2 + 1, sizeof *mods);
  int nmods = 0;
  for (int i = 0; i < m->params.len; i++) {
    IrValue *v = m->params.items[i];
    int64_t n = ir_numel(&v->shape);
    total += n;
    bytes += n * ir_dtype_size(v->dtype);
    if (!v->frozen) trainable += n;
    /* count under the module path at depth 1 and at depth 2 (stack layers collapse) */
    for (int depth = 1; depth <= 2; depth++) {
      size_t len = module_prefix(v->name, depth);
      if (!len) continue;
      /* list the parts of a top-level module only when it has sub-modules
       * (gpt: wte, wpe, h, ln_f), not the weight and bias of a LayerNorm */
      if (depth == 2 && !has_submodules(m, v->name, module_prefix(v->name, 1))) continue;
      if (len > 255) len = 255;
      int k = 0;
      while (k < nmods && (strlen(mods[k].name) != len || strncmp(mods[k].name, v->name, len) != 0))
        k++;
      if (k == nmods) {
        memcpy(mods[k].name, v->name, len);
        mods[k].name[len] = 0;
        nmods++;
      }
      mods[k].params += n;
      if (!v->frozen) mods[k].trainable += n;
    }
  }
  for (int fi = 0; fi < m->funcs.len; fi++) {
    IrFunc *f = m->funcs.items[fi];
    for (int i = 0; i < f->nodes.len; i++) flops += ir_flops(f->nodes.items[i]);
  }
  if (o->json) {
    json_object *root = json_object_new_object();
    json_object_object_add(root, "model", json_object_new_string(m->name));
    json_object_object_add(root, "total_params", json_object_new_int64(total));
    json_object_object_add(root, "trainable_params", json_object_new_int64(trainable));
    json_object_object_add(root, "param_bytes", json_object_new_int64(bytes));
    json_object *mj = json_object_new_object();
    for (int k = 0; k < nmods; k++) {
      json_object *e = json_object_new_object();
      json_object_object_add(e, "params", json_object_new_int64(mods[k].params));
      json_object_object_add(e, "trainable", json_object_new_int64(mods[k].trainable));
      json_object_object_add(mj, mods[k].name, e);
    }
    json_object_object_add(root, "modules", mj);
    json_object_object_add(root, "forward_flops", json_object_new_int64(flops));
    json_object *inputs = json_object_new_object();
    IrFunc *f = m->funcs.items[0];
    for (int i = 0; i < f->inputs.len; i++) {
      IrValue *v = f->inputs.items[i];
      json_object *sh = json_object_new_array();
      for (int k = 0; k < v->shape.rank; k++)
        json_object_array_add(sh, json_object_new_int64(v->shape.d[k]));
      json_object_object_add(inputs, v->name, sh);
    }
    json_object_object_add(root, "inputs", inputs);
    printf("%s\n",
           json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED));
    json_object_put(root);
  } else {
    printf("model %s\n", m->name);
    printf("  %-28s %16s %16s\n", "module", "parameters", "trainable");
    for (int k = 0; k < nmods; k++)
      printf("  %-28s %16lld %16lld\n", mods[k].name, (long long)mods[k].params,
             (long long)mods[k].trainable);

    printf("  %-28s %16lld %16lld\n", "total", (long long)total, (long long)trainable);
    printf("  parameter bytes   %lld (%.1f MiB)\n", (long long)bytes, (double)bytes / (1 << 20));
    printf("  forward FLOPs     %lld (%.3f GFLOP) for inputs", (long long)flops,
           (double)flops / 1e9);
    IrFunc *f = m->funcs.items[0];
    for (int i = 0; i < f->inputs.len; i++) {
      IrValue *v = f->inputs.items[i];
      printf("%s%s:%s[", i ? ", " : " ", v->name, ir_dtype_name(v->dtype));
      for (int k = 0; k < v->shape.rank; k++)
        printf("%s%lld", k ? ", " : "", (long long)v->shape.d[k]);
      printf("]");
    }
    printf("\n");
  }
  free(mods);
  return finish(&d, p, &r, EXIT_OK);
}

/* ---- plan and compile (the backend) ---- */

/* The collectives of one step (@train, else @forward), the same on every
 * rank: per collective kind and mesh axis the calls and what one rank sends
 * (ring algorithms, ir_collective_elems); with --json also each one. Shown
 * only on a mesh of more than one rank. */
typedef struct CollTotal {
  IrOp op;
  int axis, calls;
  int phase_calls[3]; /* forward, backward, update */
  int64_t elems, bytes;
} CollTotal;

/* The padded vocabularies (passes/vocabpad.c): each parameter's real rows,
 * padded rows and the rows one rank holds, into root's "padded_vocab" (JSON)
 * or as lines. */
static void print_padded(const IrModule *m, json_object *root) {
  json_object *list = root ? json_object_new_array() : NULL;
  for (int i = 0; i < m->params.len; i++) {
    const IrValue *p = m->params.items[i];
    if (!p->rows || p->role != IR_ROLE_PARAM || mmc_zero_padded(m, p)) continue; /* ZeRO's */
    int64_t local = p->shape.d[0];
    for (int a = 0; a < IR_NAXES; a++)
      if (p->pl[a].kind == IR_PL_S && p->pl[a].dim == 0 && m->mesh[a] > 1) local /= m->mesh[a];
    if (!list) {
      printf("  vocabulary padded: @%s %lld rows -> %lld (a multiple of 128 tp), %lld rows per "
             "rank; the padding is out of the loss, never trained or saved\n",
             p->name, (long long)p->rows, (long long)p->shape.d[0], (long long)local);
      continue;
    }
    json_object *e = json_object_new_object();
    json_object_object_add(e, "param", json_object_new_string(p->name));
    json_object_object_add(e, "rows", json_object_new_int64(p->rows));
    json_object_object_add(e, "padded_rows", json_object_new_int64(p->shape.d[0]));
    json_object_object_add(e, "local_rows", json_object_new_int64(local));
    json_object_array_add(list, e);
  }
  if (root) json_object_object_add(root, "padded_vocab", list);
}

/* f's gradient buckets only start where they stand (passes/bucket.c). */
static bool buckets_overlapped(const IrFunc *f) {
  for (int i = 0; i < f->nodes.len; i++)
    if (((const IrNode *)f->nodes.items[i])->op == IR_OP_BUCKET_WAIT) return true;
  return false;
}

/* ZeRO-3's prefetched parameter gathers (passes/bucket.c): how many, and
 * the most bytes of gathered parameters posted ahead of their wait at any
 * node (the extra gathered layer in flight, planned in the act arena). */
static int prefetch_totals(const IrModule *m, const IrFunc *f, int64_t *most) {
  int n = 0;
  int64_t ahead = 0;
  *most = 0;
  for (int i = 0; i < f->nodes.len; i++) {
    const IrNode *u = f->nodes.items[i];
    if (prefetch_id(u) >= 0) {
      n++;
      ahead += ir_local_numel(m, u->out[0]) * ir_dtype_size(u->out[0]->dtype);
      if (ahead > *most) *most = ahead;
    } else if (u->op == IR_OP_BUCKET_WAIT) {
      for (int j = 0; j < i; j++) {
        const IrNode *g = f->nodes.items[j];
        if (prefetch_id(g) == u->attrs.v[IR_ATTR_BUCKET].i)
          ahead -= ir_local_numel(m, g->out[0]) * ir_dtype_size(g->out[0]->dtype);
      }
    }
  }
  return n;
}

static void plan_collectives(IrModule *m, const MmPlan *pl, json_object *root, bool detail) {
  if (ir_world_size(m) <= 1) return;
  IrFunc *f = ir_module_func(m, "train");
  if (!f) f = ir_module_func(m, "forward");
  if (!f) return;
  CollTotal tot[64];
  int nt = 0, nbuckets = 0, nbucketed = 0, bwd = -1, upd = -1;
  if (strcmp(f->name, "train") == 0) ir_train_phases(f, &bwd, &upd);
  json_object *list = root ? json_object_new_array() : NULL;
  for (int i = 0; i < f->nodes.len; i++) {
    IrNode *n = f->nodes.items[i];
    if (!ir_op_is_collective(n->op)) continue;
    /* a gradient bucket (passes/bucket.h) is one call: the all-reduce (or
     * reduce-scatter) of its members together */
    int run = bucket_run(f, i);
    if (run == 0) continue;
    int64_t msg = 0, sent = ir_collective_elems(m, n, &msg), bytes;
    int a = (int)n->attrs.v[IR_ATTR_MESH].i, k = 0;
    if (bucket_id(n) >= 0) {
      for (int j = 1; j < run; j++) {
        int64_t t = 0;
        ir_collective_elems(m, f->nodes.items[i + j], &t);
        msg += t;
      }
      sent = (n->op == IR_OP_ALL_REDUCE ? 2 : 1) * msg * (m->mesh[a] - 1) / m->mesh[a];
      nbuckets++, nbucketed += run;
    }
    bytes = sent * ir_dtype_size(n->in[0]->dtype);
    while (k < nt && (tot[k].op != n->op || tot[k].axis != a)) k++;
    if (k == nt && nt < 64) tot[nt++] = (CollTotal){.op = n->op, .axis = a};
    if (k < nt) {
      tot[k].calls++, tot[k].elems += sent, tot[k].bytes += bytes;
      tot[k].phase_calls[(upd >= 0 && i >= upd) ? 2 : (bwd >= 0 && i >= bwd) ? 1 : 0]++;
    }
    if (list) {
      json_object *e = json_object_new_object();
      json_object_object_add(e, "kind", json_object_new_string(ir_ops[n->op].name));
      json_object_object_add(e, "axis", json_object_new_string(ir_axis_name((IrAxis)a)));
      json_object_object_add(e, "elements", json_object_new_int64(msg));
      json_object_object_add(e, "sent_elements", json_object_new_int64(sent));
      json_object_object_add(e, "sent_bytes", json_object_new_int64(bytes));
      json_object_object_add(e, "scope", n->scope ? json_object_new_string(n->scope) : NULL);
      json_object_object_add(e, "phase", json_object_new_string(ir_phase_name(i, bwd, upd)));
      if (bucket_id(n) >= 0) {
        json_object *g = json_object_new_array();
        for (int j = 0; j < run; j++) {
          const IrValue *p = bucket_grad_param(f, i + j);
          json_object_array_add(g, p ? json_object_new_string(p->name) : NULL);
        }
        json_object_object_add(e, "bucket", json_object_new_int64(bucket_id(n)));
        json_object_object_add(e, "gradients", g);
      }
      json_object_array_add(list, e);
    }
  }
  if (root) {
    json_object *mesh = json_object_new_object();
    for (int a = 0; a < IR_NAXES; a++)
      json_object_object_add(mesh, ir_axis_name((IrAxis)a), json_object_new_int(m->mesh[a]));
    json_object_object_add(root, "mesh", mesh);
    json_object_object_add(root, "collectives", list);
    int64_t ahead;
    int npf = prefetch_totals(m, f, &ahead);
    if (npf) {
      json_object *o = json_object_new_object();
      json_object_object_add(o, "gathers", json_object_new_int(npf));
      json_object_object_add(o, "bytes_ahead", json_object_new_int64(ahead));
      json_object_object_add(root, "zero3_prefetch", o);
    }
    if (nbuckets) {
      json_object_object_add(root, "bucket_mb",
                             json_object_new_double(pl ? pl->bucket_mb : MM_BUCKET_MB_DEFAULT));
      json_object_object_add(root, "buckets_overlapped",
                             json_object_new_boolean(buckets_overlapped(f)));
    }
    json_object *t = json_object_new_array();
    for (int k = 0; k < nt; k++) {
      json_object *e = json_object_new_object();
      json_object_object_add(e, "kind", json_object_new_string(ir_ops[tot[k].op].name));
      json_object_object_add(e, "axis", json_object_new_string(ir_axis_name((IrAxis)tot[k].axis)));
      json_object_object_add(e, "calls", json_object_new_int(tot[k].calls));
      json_object_object_add(e, "forward_calls", json_object_new_int(tot[k].phase_calls[0]));
      json_object_object_add(e, "backward_calls", json_object_new_int(tot[k].phase_calls[1]));
      json_object_object_add(e, "update_calls", json_object_new_int(tot[k].phase_calls[2]));
      json_object_object_add(e, "sent_elements", json_object_new_int64(tot[k].elems));
      json_object_object_add(e, "sent_bytes", json_object_new_int64(tot[k].bytes));
      json_object_array_add(t, e);
    }
    json_object_object_add(root, "collective_totals", t);
    mmc_plan_subplans(m, root);
    print_padded(m, root);
    return;
  }
  printf("  mesh dp = %d, cp = %d, tp = %d: %d ranks, each running @%s on its own piece\n",
         m->mesh[IR_AX_DP], m->mesh[IR_AX_CP], m->mesh[IR_AX_TP], ir_world_size(m), f->name);
  mmc_plan_subplans(m, NULL);
  print_padded(m, NULL);
  printf("  collectives per step, per rank:\n");
  for (int k = 0; k < nt; k++)
    printf("    %-15s %-3s %5d calls (%d forward, %d backward, %d update) %14lld elements sent "
           "%14lld bytes\n",
           ir_ops[tot[k].op].name, ir_axis_name((IrAxis)tot[k].axis), tot[k].calls,
           tot[k].phase_calls[0], tot[k].phase_calls[1], tot[k].phase_calls[2],
           (long long)tot[k].elems, (long long)tot[k].bytes);
  int64_t ahead;
  int npf = prefetch_totals(m, f, &ahead);
  if (npf)
    printf("  ZeRO-3 prefetch: %d parameter gathers posted one layer ahead (non-blocking, waited "
           "for before their first use), at most %lld bytes of gathered parameters in flight "
           "ahead of use (in the act arena above)\n",
           npf, (long long)ahead);
  if (!nbuckets) return;
  printf("  gradient buckets (bucket_mb = %g): %d gradients reduced in %d call%s, %s%s\n",
         pl ? pl->bucket_mb : MM_BUCKET_MB_DEFAULT, nbucketed, nbuckets, nbuckets == 1 ? "" : "s",
         buckets_overlapped(f) ? "overlapped with the backward (waited for before the optimizer)"
                               : "blocking (--no-overlap)",
         detail ? "" : " (--detail lists them)");
  for (int i = 0; detail && i < f->nodes.len; i++) {
    const IrNode *n = f->nodes.items[i];
    int run = bucket_run(f, i);
    if (bucket_id(n) < 0 || run == 0) continue;
    int64_t msg = 0;
    for (int j = 0; j < run; j++) {
      int64_t t = 0;
      ir_collective_elems(m, f->nodes.items[i + j], &t);
      msg += t;
    }
    const IrValue *p0 = bucket_grad_param(f, i), *p1 = bucket_grad_param(f, i + run - 1);
    printf("    bucket %-3lld %-14s %-3s %4d gradient%s %12lld elements  %s%s%s\n",
           (long long)bucket_id(n), ir_ops[n->op].name,
           ir_axis_name((IrAxis)n->attrs.v[IR_ATTR_MESH].i), run, run == 1 ? " " : "s",
           (long long)msg, p0 ? p0->name : "?", run > 1 ? " .. " : "",
           run > 1 ? (p1 ? p1->name : "?") : "");
  }
}

/* Layer norms over channels split on an axis (split statistics): the
 * all-reduces their kernels make (runtime/comm/mmrt_split.c), which no
 * collective node shows: forward 2 of the rows (sums of x, then of
 * (x - mean)^2), backward 1 of twice the rows (sums of g and g * xhat). */
static void plan_split_norms(IrModule *m, json_object *root, bool detail) {
  IrFunc *f = ir_module_func(m, "train");
  if (!f) return;
  json_object *list = root ? json_object_new_array() : NULL;
  int64_t calls[2] = {0}, elems[2] = {0};
  int axis = -1;
  for (int i = 0; i < f->nodes.len; i++) {
    const IrNode *n = f->nodes.items[i];
    if (n->op != IR_OP_LAYER_NORM && n->op != IR_OP_LAYER_NORM_GRAD) continue;
    const IrValue *x = n->in[n->op == IR_OP_LAYER_NORM ? 0 : 1];
    int a = -1, cd = ir_norm_dim(&n->attrs, &x->shape);
    for (int b = 0; b < IR_NAXES; b++)
      if (m->mesh[b] > 1 && x->pl[b].kind == IR_PL_S && x->pl[b].dim == cd) a = b;
    if (a < 0) continue;
    IrShape l;
    ir_local_shape(m, x->pl, &x->shape, &l);
    int64_t rows = ir_numel(&l) / l.d[cd];
    int back = n->op == IR_OP_LAYER_NORM_GRAD, nc = back ? 1 : 2;
    int64_t sent = nc * 2 * (back ? 2 : 1) * rows * (m->mesh[a] - 1) / m->mesh[a];
    if (!calls[0] && !calls[1] && !root)
      printf("  layer norms over split channels (split statistics: the kernel's all-reduces, "
             "runtime/comm/mmrt_split.c), per rank%s:\n",
             detail ? "" : " (--detail lists each norm)");
    calls[back] += nc, elems[back] += sent, axis = a;
    if (!root && !detail) continue;
    if (!root) {
      printf("    %-32s %-8s %s, channels %lld of %lld: %d all_reduce%s of %lld elements\n",
             n->scope ? n->scope : "?", back ? "backward" : "forward", ir_axis_name((IrAxis)a),
             (long long)l.d[cd], (long long)x->shape.d[cd], nc, nc > 1 ? "s" : "",
             (long long)(back ? 2 * rows : rows));
    } else {
      json_object *e = json_object_new_object();
      json_object_object_add(e, "scope", n->scope ? json_object_new_string(n->scope) : NULL);
      json_object_object_add(e, "phase", json_object_new_string(back ? "backward" : "forward"));
      json_object_object_add(e, "axis", json_object_new_string(ir_axis_name((IrAxis)a)));
      json_object_object_add(e, "all_reduces", json_object_new_int(nc));
      json_object_object_add(e, "elements", json_object_new_int64(back ? 2 * rows : rows));
      json_object_object_add(e, "sent_elements", json_object_new_int64(sent));
      json_object_array_add(list, e);
    }
  }
  if (root) { /* only when some norm splits: plans without one print as before */
    if (json_object_array_length(list))
      json_object_object_add(root, "split_norms", list);
    else
      json_object_put(list);
    return;
  }
  if (calls[0] + calls[1])
    printf(
        "    %-15s %-3s %5lld calls (%lld forward, %lld backward, 0 update) %14lld elements sent "
        "%14lld bytes\n",
        "all_reduce", ir_axis_name((IrAxis)axis), (long long)(calls[0] + calls[1]),
        (long long)calls[0], (long long)calls[1], (long long)(elems[0] + elems[1]),
        4 * (long long)(elems[0] + elems[1]));
}

/* Context parallel: per rank and attention, the scores (never stored
 * whole: the flash kernel works in tiles; a ring computes them one K/V
 * block at a time), the ring's workspace (its K/V and dK/dV blocks in
 * flight, a block's output, USP's head-split copies: the node's planned
 * scratch in the activation arena, support/ring_ws.h) and its shifts,
 * which no collective node shows (the kernel makes them). */
static void plan_cp(IrModule *m, json_object *root, bool detail) {
  int P = m->mesh[IR_AX_CP];
  IrFunc *f = ir_module_func(m, "train");
  if (P <= 1 || !f) return;
  int bwd = -1, upd = -1;
  ir_train_phases(f, &bwd, &upd);
  bool bal = ir_cp_balanced(m);
  json_object *list = root ? json_object_new_array() : NULL;
  if (!root)
    printf("  context parallel (cp = %d, %s%s), per rank%s:\n", P,
           m->plan.cp_kind != MM_CP_RING ? "ulysses"
           : m->plan.cp_ulysses > 1      ? "USP: a ring of Ulysses groups"
                                         : "ring",
           !bal                     ? ""
           : m->plan.cp_ulysses > 1 ? "; balanced: group g holds the ring's chunks g and "
                                      "2R-1-g, a piece of each per rank"
                                    : "; balanced: rank i holds sequence chunks i and 2cp-1-i",
           detail ? " and attention of @train" : " (--detail: each attention's scores)");
  int64_t shifts[2] = {0}, shift_elems[2] = {0}, a2a[2] = {0}, a2a_elems[2] = {0};
  for (int i = 0; i < f->nodes.len; i++) {
    const IrNode *n = f->nodes.items[i];
    if (n->op != IR_OP_ATTENTION && n->op != IR_OP_ATTENTION_GRAD) continue;
    bool ring = ir_attrs_has(&n->attrs, IR_ATTR_RING) && n->attrs.v[IR_ATTR_RING].i;
    int qi = n->op == IR_OP_ATTENTION ? 0 : 1;
    IrShape q, k;
    ir_local_shape(m, n->in[qi]->pl, &n->in[qi]->shape, &q);
    ir_local_shape(m, n->in[qi + 1]->pl, &n->in[qi + 1]->shape, &k);
    int64_t B = q.d[0], Tq = q.d[1], H = q.d[2], S = n->in[qi + 1]->shape.d[1],
            kvb = k.d[0] * k.d[1] * k.d[2] * k.d[3];
    int back = n->op == IR_OP_ATTENTION_GRAD;
    /* scores of this rank's queries against every key; one ring block */
    int64_t scores = 4 * B * H * Tq * S, block = ring ? 4 * B * H * Tq * k.d[1] : scores;
    IrPlacement nocp[IR_NAXES]; /* the same plan without cp: serial over cp */
    memcpy(nocp, n->in[qi]->pl, sizeof nocp);
    nocp[IR_AX_CP] = (IrPlacement){IR_PL_B, 0};
    IrShape q0;
    ir_local_shape(m, nocp, &n->in[qi]->shape, &q0);
    int64_t serial = 4 * q0.d[0] * q0.d[2] * q0.d[1] * S;
    int64_t inflight = mp_ring_ws_bytes(m, n);
    /* USP: the ring runs over R = cp / U groups, on U times the rows */
    int U = ring && m->plan.cp_ulysses > 1 ? m->plan.cp_ulysses : 1, R = P / U;
    block *= U;
    int64_t ns = ring ? (back ? 2 * R - 1 : R - 1) : 0;
    shifts[back] += ns, shift_elems[back] += ns * 2 * kvb;
    if (U > 1) { /* in-kernel all-to-alls: q, k, v, out (backward also dout; dq, dk, dv back) */
      int64_t qb = B * Tq * H * q.d[3], moved = back ? 4 * qb + 4 * kvb : 2 * qb + 2 * kvb;
      a2a[back] += back ? 8 : 4, a2a_elems[back] += moved * (U - 1) / U;
    }
    if (!root && detail) {
      printf("    %-24s %-9s scores %lld bytes (cp = 1: %lld), %s %lld bytes; ",
             n->scope ? n->scope : "?", back ? "backward" : "forward", (long long)scores,
             (long long)serial, ring ? "a K/V block's" : "all at once", (long long)block);
      if (ring)
        printf("K/V%s blocks in flight and workspace %lld bytes (activation arena); %lld ring "
               "shifts of %lld elements\n",
               back ? " and dK/dV" : "", (long long)inflight, (long long)ns, (long long)(2 * kvb));
      else
        printf("%s; never stored whole (flash tiles)\n",
               H < n->in[qi]->shape.d[2] ? "heads split (Ulysses)" : "not split");
    } else if (root) {
      json_object *e = json_object_new_object();
      json_object_object_add(e, "scope", n->scope ? json_object_new_string(n->scope) : NULL);
      json_object_object_add(e, "phase", json_object_new_string(back ? "backward" : "forward"));
      json_object_object_add(e, "ring", json_object_new_boolean(ring));
      json_object_object_add(e, "score_bytes", json_object_new_int64(scores));
      json_object_object_add(e, "serial_score_bytes", json_object_new_int64(serial));
      json_object_object_add(e, "score_block_bytes", json_object_new_int64(block));
      json_object_object_add(e, "ring_workspace_bytes", json_object_new_int64(inflight));
      json_object_object_add(e, "ring_shifts", json_object_new_int64(ns));
      json_object_object_add(e, "ring_shift_elements", json_object_new_int64(2 * kvb));
      json_object_array_add(list, e);
    }
  }
  if (!root && shifts[0] + shifts[1])
    printf(
        "    %-15s %-3s %5lld calls (%lld forward, %lld backward, 0 update) %14lld elements sent "
        "%14lld bytes\n",
        "ring shift", "cp", (long long)(shifts[0] + shifts[1]), (long long)shifts[0],
        (long long)shifts[1], (long long)(shift_elems[0] + shift_elems[1]),
        4 * (long long)(shift_elems[0] + shift_elems[1]));
  if (!root && a2a[0] + a2a[1])
    printf(
        "    %-15s %-3s %5lld calls (%lld forward, %lld backward, 0 update) %14lld elements sent "
        "%14lld bytes  (USP: in the ring attention, groups of %d)\n",
        "all_to_all", "cp", (long long)(a2a[0] + a2a[1]), (long long)a2a[0], (long long)a2a[1],
        (long long)(a2a_elems[0] + a2a_elems[1]), 4 * (long long)(a2a_elems[0] + a2a_elems[1]),
        m->plan.cp_ulysses);
  if (root) {
    json_object *c = json_object_new_object();
    json_object_object_add(c, "ulysses_groups",
                           json_object_new_int(m->plan.cp_ulysses > 1 ? m->plan.cp_ulysses : 1));
    json_object_object_add(c, "usp_all_to_all_forward", json_object_new_int64(a2a[0]));
    json_object_object_add(c, "usp_all_to_all_backward", json_object_new_int64(a2a[1]));
    json_object_object_add(c, "kind", json_object_new_string(mm_cp_kind_names[m->plan.cp_kind]));
    json_object_object_add(c, "balanced", json_object_new_boolean(bal));
    json_object_object_add(c, "attention", list);
    json_object_object_add(c, "ring_shifts_forward", json_object_new_int64(shifts[0]));
    json_object_object_add(c, "ring_shifts_backward", json_object_new_int64(shifts[1]));
    json_object_object_add(c, "ring_shift_elements_sent",
                           json_object_new_int64(shift_elems[0] + shift_elems[1]));
    json_object_object_add(root, "context_parallel", c);
  }
}

/* Activation memory per stack layer (passes/actmem.h): mmc's saved bytes
 * and Korthikanti et al.'s Table 2 for the same s, b, h, a, t and plan. */
static void plan_layers(const IrModule *m, json_object *root, bool detail) {
  MpLayerAct L[256];
  int n = mp_layer_acts(m, L, 256);
  json_object *list = root && n ? json_object_new_array() : NULL;
  if (!root && !detail && n) { /* one line: the sum and the largest */
    int64_t sum = 0;
    double ksum = 0;
    int big = 0;
    for (int i = 0; i < n; i++) {
      sum += L[i].bytes, ksum += L[i].s ? L[i].kscaled : 0;
      if (L[i].bytes > L[big].bytes) big = i;
    }
    printf("  activations per layer, one rank: %d stack layers hold %lld bytes for the backward "
           "(most: %s.%d, %lld)",
           n, (long long)sum, ((const IrGroup *)m->groups.items[L[big].group])->name, L[big].layer,
           (long long)L[big].bytes);
    if (ksum > 0) printf("; Korthikanti et al.'s Table 2 at the activation dtype: %.0f", ksum);
    printf(" (--detail: each layer)\n");
    return;
  }
  for (int i = 0; i < n; i++) {
    const IrGroup *g = m->groups.items[L[i].group];
    if (list) {
      json_object *e = json_object_new_object();
      json_object_object_add(e, "group", json_object_new_string(g->name));
      json_object_object_add(e, "layer", json_object_new_int(L[i].layer));
      json_object_object_add(e, "act_bytes", json_object_new_int64(L[i].bytes));
      json_object_object_add(e, "values", json_object_new_int(L[i].nvalues));
      json_object_object_add(e, "dropouts", json_object_new_int64(L[i].dropout));
      if (L[i].s) {
        json_object *k = json_object_new_object();
        json_object_object_add(k, "row", json_object_new_string(L[i].row));
        json_object_object_add(k, "s", json_object_new_int64(L[i].s));
        json_object_object_add(k, "b", json_object_new_int64(L[i].b));
        json_object_object_add(k, "h", json_object_new_int64(L[i].h));
        json_object_object_add(k, "a", json_object_new_int64(L[i].a));
        json_object_object_add(k, "t", json_object_new_int64(L[i].t));
        json_object_object_add(k, "bytes_16bit", json_object_new_double(L[i].k16));
        json_object_object_add(k, "bytes_scaled", json_object_new_double(L[i].kscaled));
        json_object_object_add(k, "act_dtype_bytes", json_object_new_int(L[i].act_dtype_bytes));
        json_object_object_add(e, "korthikanti", k);
      }
      json_object_array_add(list, e);
      continue;
    }
    if (i == 0)
      printf("  activations per layer, one rank (mmc: the values the backward reads; Korthikanti "
             "et al. 2022 Table 2: 16-bit tensors and 1-byte dropout masks, then the tensors at "
             "the activation dtype):\n");
    printf("    %s.%d: mmc %lld bytes (%d values; %lld dropout masks made again, not stored)",
           g->name, L[i].layer, (long long)L[i].bytes, L[i].nvalues, (long long)L[i].dropout);
    if (L[i].s)
      printf("; Korthikanti %s (s %lld, b %lld, h %lld, a %lld, t %lld): %.0f bytes, %.0f at %d "
             "bytes per element",
             L[i].row, (long long)L[i].s, (long long)L[i].b, (long long)L[i].h, (long long)L[i].a,
             (long long)L[i].t, L[i].k16, L[i].kscaled, L[i].act_dtype_bytes);
    printf("\n");
  }
  if (list) json_object_object_add(root, "layers", list);
}

/* The bf16 values of f (passes/precision.c) in the act arena, views
 * aside: their bytes, and how many. */
static int64_t bf16_act_bytes(const IrModule *m, const IrFunc *f, int *count) {
  int64_t bytes = 0;
  *count = 0;
  for (int i = 0; f && i < f->nodes.len; i++) {
    const IrNode *n = f->nodes.items[i];
    if (ir_ops[n->op].flags & OPF_VIEW) continue;
    for (int j = 0; j < n->nout; j++)
      if (n->out[j]->dtype == IR_BF16 && n->out[j]->mem_planned &&
          n->out[j]->mem_arena == IR_ROLE_ACT)
        bytes += mp_value_bytes(m, n->out[j]), (*count)++;
  }
  return bytes;
}

/* A pipeline's planned peak per rank (passes/pp_stage.h): what holds it. */
static bool plan_pp_memory(IrModule *m, int64_t data_bytes, json_object *root, bool detail,
                           char *err, size_t errlen) {
  if (m->plan.pp <= 1 || !ir_module_func(m, "train")) return true;
  PpRankMem rm[64];
  if (!pp_rank_memory(m, rm, 64, err, errlen)) return false;
  json_object *list = root ? json_object_new_array() : NULL;
  if (!root && !detail)
    printf("  per pipeline rank, its planned peak (--detail: what holds it):\n");
  if (!root && detail)
    printf("  per pipeline rank (its planned peak: the param + opt of its stages + its working "
           "set (grad arena: the values one stage part makes and reads alone, the gradients its "
           "W parts make, the update's) + in-flight micro-batches x (act + input: the values of "
           "its stages that live from one part to a later one, a forward's to its backward, an "
           "input gradient to a W run later (ZB-H1); the first slot's act arena holds @forward "
           "too) + gradient "
           "sums; kernel workspace is in the act arena. The evaluation runs @forward stage by "
           "stage on each rank's own parameters in the first slot's act and input arenas: it "
           "adds nothing to the peak, nothing is gathered):\n");
  for (int r = 0; r < m->plan.pp; r++) {
    const PpRankMem *x = &rm[r];
    if (!root && !detail) {
      printf("    rank %d: peak %lld bytes (%.3f MiB), trainer %lld with the data; evaluation "
             "%lld\n",
             r, (long long)x->peak, (double)x->peak / (1 << 20), (long long)(x->peak + data_bytes),
             (long long)x->eval);
      continue;
    }
    if (!root) {
      printf("    rank %d: peak %lld bytes = param %lld + opt %lld (of %lld + %lld) + working set "
             "%lld + %d in flight x %lld (act %lld, input %lld; the first slot's act %lld) + "
             "gradient sums %lld (%lld of them in the grad arena); trainer %lld with the data; "
             "evaluation %lld = param %lld + act %lld + input %lld\n",
             r, (long long)x->peak, (long long)x->param, (long long)x->opt, (long long)x->all_param,
             (long long)x->all_opt, (long long)(x->grad - x->homes), x->slots, (long long)x->set,
             (long long)x->act, (long long)x->input, (long long)x->act0,
             (long long)(x->sums + x->homes), (long long)x->homes,
             (long long)(x->peak + data_bytes), (long long)x->eval, (long long)x->param,
             (long long)x->eval_act, (long long)x->input);
      continue;
    }
    json_object *e = json_object_new_object();
    json_object_object_add(e, "rank", json_object_new_int(r));
    json_object_object_add(e, "peak_bytes", json_object_new_int64(x->peak));
    json_object_object_add(e, "trainer_bytes", json_object_new_int64(x->peak + data_bytes));
    json_object_object_add(e, "param_bytes", json_object_new_int64(x->param));
    json_object_object_add(e, "grad_bytes", json_object_new_int64(x->grad));
    json_object_object_add(e, "opt_bytes", json_object_new_int64(x->opt));
    json_object_object_add(e, "in_flight", json_object_new_int(x->slots));
    json_object_object_add(e, "act_bytes", json_object_new_int64(x->act));
    json_object_object_add(e, "first_act_bytes", json_object_new_int64(x->act0));
    json_object_object_add(e, "input_bytes", json_object_new_int64(x->input));
    json_object_object_add(e, "in_flight_set_bytes", json_object_new_int64(x->set));
    json_object_object_add(e, "grad_sum_bytes", json_object_new_int64(x->sums));
    json_object_object_add(e, "grad_home_bytes", json_object_new_int64(x->homes));
    json_object_object_add(e, "eval_bytes", json_object_new_int64(x->eval));
    json_object_object_add(e, "eval_act_bytes", json_object_new_int64(x->eval_act));
    json_object_array_add(list, e);
  }
  if (root) json_object_object_add(root, "pp_ranks", list);
  return true;
}

/* plan --search: one candidate built quietly (tools/mmc_predict.h) */
typedef struct SearchBuild {
  Diag d;
  FeProgram *p;
  FeResult r;
  FILE *sink;
  char *buf;
  size_t len;
} SearchBuild;

static IrModule *search_build(void *user, const MmPlanFlags *flags, void **handle, char *err,
                              size_t errn) {
  Opts c = *(const Opts *)user;
  SearchBuild *b = calloc(1, sizeof *b);
  *handle = b;
  if (!b) return NULL;
  c.flags = *flags;
  diag_start(&b->d, &c);
  b->sink = open_memstream(&b->buf, &b->len);
  if (b->sink) b->d.out = b->sink;
  IrModule *m = build(&c, &b->d, &b->p, &b->r, NULL, NULL, NULL);
  if (b->sink) fflush(b->sink);
  if (!m) snprintf(err, errn, "%s", b->buf && b->len ? b->buf : "refused");
  return m;
}

static void search_release(void *user, void *handle) {
  SearchBuild *b = handle;
  if (!b) return;
  b->d.errors = 0; /* counted as a reason, not reported */
  finish(&b->d, b->p, &b->r, EXIT_OK);
  if (b->sink) fclose(b->sink);
  free(b->buf);
  free(b);
}

/* --tile-buckets K1,K2,...: the model again at each smaller K (ascending,
 * below the model's own), same parameters, one program each; NULL-free
 * and false after a message. */
static bool tile_buckets(Opts *o, IrModule *m, IrModule **bk, FeProgram **bp, FeResult *br, int *nb,
                         Diag *d) {
  *nb = 0;
  if (!o->tile_buckets) return true;
  int64_t K = -1, prev = 0;
  const IrFunc *f = ir_module_func(m, "forward");
  for (int i = 0; f && i < f->inputs.len; i++) {
    const IrValue *v = f->inputs.items[i];
    if ((!strcmp(v->name, "pixels") || !strcmp(v->name, "tiles")) && v->shape.rank == 5)
      K = v->shape.d[1];
  }
  if (K < 0) {
    fprintf(stderr,
            "mmc: error: --tile-buckets: model %s has no input pixels or tiles f32[B, K, 3, S, "
            "S] (tiles a row)\n",
            m->name);
    return false;
  }
  if (m->plan.pp > 1 || m->plan.micro_batches > 1 || o->task != MMRT_TASK_TRAIN) {
    fprintf(stderr, "mmc: error: --tile-buckets: a trainer without pp or micro-batches only\n");
    return false;
  }
  int k = -1;
  for (int i = 0; i < o->noverrides; i++)
    if (strcmp(o->overrides[i].name, "K") == 0) k = i;
  if (k < 0 && o->noverrides == 64) return false;
  const char *s = o->tile_buckets;
  char vals[8][24];
  while (*s) {
    char *end;
    long long v = strtoll(s, &end, 10);
    if (end == s || (*end && *end != ',') || v < 1 || v >= K || v <= prev || *nb == 8) {
      fprintf(stderr,
              "mmc: error: --tile-buckets '%s': up to 8 ascending tile counts from 1 to below "
              "the model's K = %lld\n",
              o->tile_buckets, (long long)K);
      *nb = 0; /* nothing built yet */
      return false;
    }
    snprintf(vals[*nb], sizeof vals[*nb], "%lld", v);
    prev = v, ++*nb;
    s = *end ? end + 1 : end;
  }
  int n = *nb, at = k < 0 ? o->noverrides++ : k;
  FeOverride keep = o->overrides[at];
  bool ok = true;
  *nb = 0;
  for (int i = 0; ok && i < n; i++) {
    o->overrides[at] = (FeOverride){.name = "K", .value = vals[i]};
    bk[i] = build(o, d, &bp[i], &br[i], NULL, NULL, NULL);
    *nb = i + 1;
    ok = bk[i] != NULL;
  }
  if (k < 0)
    o->noverrides--;
  else
    o->overrides[at] = keep;
  return ok;
}

/* One rank's planned bytes: the peak, or under a pipeline its largest rank's. */
static int64_t rank_peak(IrModule *m, const MpSummary *s, int64_t sums) {
  char err[256];
  int64_t most = s->total + sums;
  PpRankMem *pm = m->plan.pp > 1 ? calloc((size_t)m->plan.pp, sizeof *pm) : NULL;
  if (pm && pp_rank_memory(m, pm, m->plan.pp, err, sizeof err)) {
    most = 0;
    for (int r = 0; r < m->plan.pp; r++)
      if (pm[r].peak > most) most = pm[r].peak;
  }
  free(pm);
  return most;
}

static int cmd_plan(Opts *o) {
  MmDevice dev;
  char derr[512];
  if (o->device && !mm_device_load(o->device, &dev, derr, sizeof derr)) {
    fprintf(stderr, "mmc: error: %s\n", derr);
    return EXIT_USER;
  }
  if (o->search) return mmc_search(&dev, o->devices, &o->flags, search_build, search_release, o, 5);
  Diag d;
  diag_start(&d, o);
  FeProgram *p;
  FeResult r;
  IrModule *m = build(o, &d, &p, &r, NULL, NULL, NULL);
  if (!m) return finish(&d, p, &r, EXIT_USER);
  if (o->devices && o->devices != ir_world_size(m) * m->plan.pp) {
    /* --devices: the model's dp replaced so that the plan fills them */
    int per = m->plan.tp * m->plan.cp * m->plan.pp;
    if (o->devices % per) {
      fprintf(stderr, "mmc: error: --devices %d: not a multiple of tp * cp * pp = %d\n", o->devices,
              per);
      return finish(&d, p, &r, EXIT_USER);
    }
    finish(&d, p, &r, EXIT_OK);
    o->flags.plan.dp = o->devices / per;
    o->flags.given[MM_SET_DP] = true;
    diag_start(&d, o);
    m = build(o, &d, &p, &r, NULL, NULL, NULL);
    if (!m) return finish(&d, p, &r, EXIT_USER);
  }
  MpSummary s;
  char err[256];
  if (!mp_summarize(m, &s, err, sizeof err)) {
    fprintf(stderr, "mmc: error: %s\n", err);
    return finish(&d, p, &r, EXIT_USER);
  }
  /* micro-batches without a pipeline: the trainer's gradient sums
   * (passes/accum.h), of them the deferred dp reductions' operands */
  int64_t deferred_sums = 0, sums = mb_accum_bytes(m, ir_module_func(m, "train"), &deferred_sums);
  static const IrRole order[] = {IR_ROLE_PARAM, IR_ROLE_GRAD, IR_ROLE_OPT, IR_ROLE_ACT,
                                 IR_ROLE_INPUT};
  int64_t kv_bytes = 0; /* the KV caches of @prefill and @decode, inputs shared by name */
  int nkv = 0;
  IrFunc *pf = ir_module_func(m, "prefill");
  for (int i = 0; pf && i < pf->inputs.len; i++) {
    IrValue *v = pf->inputs.items[i];
    if (ends_with(v->name, ".k_cache") || ends_with(v->name, ".v_cache"))
      kv_bytes += mp_value_bytes(m, v), nkv++;
  }
  /* A trainer also holds the data set it binds (mmrt_main.h): every task
   * loads both Fashion-MNIST splits.  Its measured peak is compared with
   * the sum (mmrt_mem.h). */
  int64_t data_bytes = ir_module_func(m, "train") ? MMRT_FMNIST_RESIDENT_BYTES : 0;
  if (m->train.data.format == MM_FMT_CONVERSATION) data_bytes = 0; /* not Fashion-MNIST */
  if (o->json) {
    json_object *root = json_object_new_object(), *roles = json_object_new_object(),
                *funcs = json_object_new_object();
    json_object_object_add(root, "model", json_object_new_string(m->name));
    json_object_object_add(root, "peak_bytes", json_object_new_int64(s.total));
    json_object_object_add(root, "data_bytes", json_object_new_int64(data_bytes));
    json_object_object_add(root, "trainer_bytes",
                           json_object_new_int64(s.total + sums + data_bytes));
    for (int i = 0; i < 5; i++)
      json_object_object_add(roles, ir_role_name(order[i]),
                             json_object_new_int64(s.arena[order[i]]));
    json_object_object_add(root, "by_role", roles);
    json_object_object_add(root, "grad_sum_bytes", json_object_new_int64(sums));
    json_object_object_add(root, "deferred_sum_bytes", json_object_new_int64(deferred_sums));
    json_object_object_add(root, "grad_home_bytes",
                           json_object_new_int64(mb_home_bytes(m, ir_module_func(m, "train"))));
    int64_t fused_elems, added_elems; /* docs/accumulation.md: into the sums by the matmul */
    mb_sum_elems(m, ir_module_func(m, "train"), &fused_elems, &added_elems);
    json_object_object_add(root, "sum_matmul_elems", json_object_new_int64(fused_elems));
    json_object_object_add(root, "sum_add_elems", json_object_new_int64(added_elems));
    int nbf;
    const IrFunc *tf = ir_module_func(m, "train");
    json_object_object_add(
        root, "bf16_act_bytes",
        json_object_new_int64(bf16_act_bytes(m, tf ? tf : ir_module_func(m, "forward"), &nbf)));
    if (nkv) json_object_object_add(root, "kv_cache_bytes", json_object_new_int64(kv_bytes));
    for (int i = 0; i < s.nfuncs; i++) {
      const MpFuncStats *f = &s.funcs[i];
      json_object *e = json_object_new_object();
      json_object_object_add(e, "act_bytes", json_object_new_int64(f->arena[IR_ROLE_ACT]));
      json_object_object_add(e, "grad_bytes", json_object_new_int64(f->arena[IR_ROLE_GRAD]));
      json_object_object_add(e, "live_peak_bytes", json_object_new_int64(f->live_peak));
      json_object_object_add(e, "buffers", json_object_new_int(f->nbuffers));
      json_object_object_add(e, "in_place", json_object_new_int(f->ninplace));
      json_object_object_add(e, "views", json_object_new_int(f->nviews));
      json_object_object_add(
          e, "bf16_bytes",
          json_object_new_int64(bf16_act_bytes(m, ir_module_func(m, f->name), &nbf)));
      json_object_object_add(funcs, f->name, e);
    }
    json_object_object_add(root, "funcs", funcs);
    plan_layers(m, root, true);
    plan_collectives(m, &m->plan, root, true);
    mmc_plan_frozen(m, root);
    mmc_plan_hzero(m, root);
    mmc_plan_zero_replicated(m, root);
    plan_cp(m, root, true);
    plan_split_norms(m, root, true);
    if (!plan_pp_memory(m, data_bytes, root, true, err, sizeof err)) {
      json_object_put(root);
      fprintf(stderr, "mmc: error: pipeline: %s\n", err);
      return finish(&d, p, &r, EXIT_USER);
    }
    if (o->device && !mmc_predict(m, &dev, rank_peak(m, &s, sums), root, true)) {
      json_object_put(root);
      return finish(&d, p, &r, EXIT_USER);
    }
    printf("%s\n",
           json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED));
    json_object_put(root);
  } else {
    printf("model %s: memory plan (allocated before the first step)\n", m->name);
    for (int i = 0; i < 5; i++)
      printf("  %-6s %14lld bytes  %9.3f MiB\n", ir_role_name(order[i]),
             (long long)s.arena[order[i]], (double)s.arena[order[i]] / (1 << 20));
    printf("  %-6s %14lld bytes  %9.3f MiB\n", "peak", (long long)s.total,
           (double)s.total / (1 << 20));
    if (sums) /* allocated by the trainer beside the arenas (mmrt_mb_bytes) */
      printf("  %-6s %14lld bytes  %9.3f MiB  (the %d micro-batches' gradient sums%s)\n", "sums",
             (long long)sums, (double)sums / (1 << 20), m->plan.micro_batches,
             deferred_sums ? ": the local gradients the dp reductions take once a step" : "");
    int64_t homes = mb_home_bytes(m, ir_module_func(m, "train"));
    if (homes) /* docs/accumulation.md "Memory" */
      printf("  (of grad, %lld bytes are the %d micro-batches' gradient sums, kept there the whole "
             "step)\n",
             (long long)homes, m->plan.micro_batches);
    const IrFunc *ff = ir_module_func(m, "forward");
    for (int i = 0; m->train.data.format == MM_FMT_CONVERSATION && ff && i < ff->inputs.len; i++) {
      const IrValue *v = ff->inputs.items[i];
      if (v->name && !strcmp(v->name, "pixels") && v->shape.rank == 5)
        printf("  tiles  %lld a sample, the most (pixels f32[B, %lld, 3, %lld, %lld]): every step "
               "holds that maximum, a sample with fewer zero-padded; this plan is the maximum's "
               "(docs/architecture.md, \"Data\")\n",
               (long long)v->shape.d[1], (long long)v->shape.d[1], (long long)v->shape.d[3],
               (long long)v->shape.d[4]);
      if (v->name && !strcmp(v->name, "tiles") && v->shape.rank == 5)
        printf("  tiles  %lld a row in the pool, B x %lld in all (tiles f32[B, %lld, 3, %lld, "
               "%lld]: one pool for the batch's rows): this plan is that largest pool's; "
               "--tile-buckets runs smaller ones in the same arenas (docs/architecture.md, "
               "\"Data\")\n",
               (long long)v->shape.d[1], (long long)v->shape.d[1], (long long)v->shape.d[1],
               (long long)v->shape.d[3], (long long)v->shape.d[4]);
    }
    if (data_bytes) {
      printf("  %-6s %14lld bytes  %9.3f MiB  (Fashion-MNIST, both splits)\n", "data",
             (long long)data_bytes, (double)data_bytes / (1 << 20));
      printf("  %-7s%14lld bytes  %9.3f MiB  (peak%s + data: the trainer's measured peak)\n",
             "trainer", (long long)(s.total + sums + data_bytes),
             (double)(s.total + sums + data_bytes) / (1 << 20), sums ? " + sums" : "");
    }
    if (!plan_pp_memory(m, data_bytes, NULL, o->detail, err, sizeof err)) {
      fprintf(stderr, "mmc: error: pipeline: %s\n", err);
      return finish(&d, p, &r, EXIT_USER);
    }
    if (nkv)
      printf("  the input arena holds the KV cache: %lld bytes in %d tensors (keys and values of "
             "%d attention layers)\n",
             (long long)kv_bytes, nkv, nkv / 2);
    for (int i = 0; i < s.nfuncs; i++) {
      const MpFuncStats *f = &s.funcs[i];
      double eff = f->arena[IR_ROLE_ACT]
                       ? 100.0 * (double)f->live_peak / (double)f->arena[IR_ROLE_ACT]
                       : 100.0;
      printf("  @%s: act %lld bytes (live peak %lld, %.1f%% of it), grad %lld bytes; %d buffers, "
             "%d in place, %d views\n",
             f->name, (long long)f->arena[IR_ROLE_ACT], (long long)f->live_peak, eff,
             (long long)f->arena[IR_ROLE_GRAD], f->nbuffers, f->ninplace, f->nviews);
      int nbf;
      int64_t bf = bf16_act_bytes(m, ir_module_func(m, f->name), &nbf);
      if (nbf)
        printf("    bf16 (precision = bf16): %d values of %lld bytes in all, 2 bytes an element\n",
               nbf, (long long)bf);
    }
    plan_layers(m, NULL, o->detail);
    plan_collectives(m, &m->plan, NULL, o->detail);
    mmc_plan_frozen(m, NULL);
    mmc_plan_hzero(m, NULL);
    mmc_plan_zero_replicated(m, NULL);
    plan_cp(m, NULL, o->detail);
    plan_split_norms(m, NULL, o->detail);
  }
  if (!o->json && !pp_plan_print(stdout, m, o->timeline, o->detail, err, sizeof err)) {
    fprintf(stderr, "mmc: error: pipeline: %s\n", err);
    return finish(&d, p, &r, EXIT_USER);
  }
  if (o->timeline && m->plan.pp <= 1) {
    fprintf(stderr, "mmc: error: --timeline draws a pipeline's schedule, but pp = %d\n",
            m->plan.pp);
    return finish(&d, p, &r, EXIT_USER);
  }
  if (!o->json && o->device && !mmc_predict(m, &dev, rank_peak(m, &s, sums), NULL, o->detail))
    return finish(&d, p, &r, EXIT_USER);
  return finish(&d, p, &r, EXIT_OK);
}

static int cmd_compile(Opts *o) {
  Diag d;
  diag_start(&d, o);
  FeProgram *p;
  FeResult r;
  MmDevice dev;
  char derr[512];
  if (o->device && !mm_device_load(o->device, &dev, derr, sizeof derr)) {
    fprintf(stderr, "mmc: error: %s\n", derr);
    return EXIT_USER;
  }
  IrModule *m = build(o, &d, &p, &r, NULL, NULL, NULL);
  if (!m) return finish(&d, p, &r, EXIT_USER);
  double pred_s = 0; /* --device: the predicted step, for the trainer to print */
  if (o->device && !mmc_predict_step(m, &dev, &pred_s)) return finish(&d, p, &r, EXIT_USER);
  const char *emit = o->emit ? o->emit : "exe", *final = compile_output(o);
  char *tmp = final ? tmp_beside(final, &d) : NULL;
  if (final && !tmp) return finish(&d, p, &r, EXIT_USER);
  bool ok;
  if (strcmp(emit, "ir") == 0 && o->tile_buckets) {
    fprintf(stderr, "mmc: error: --tile-buckets: --emit ir prints the model's own IR only; the "
                    "buckets are in --emit llvm, asm, obj and exe\n");
    ok = false;
  } else if (strcmp(emit, "ir") == 0) {
    FILE *out = tmp ? fopen(tmp, "w") : stdout;
    ok = out != NULL;
    if (ok) {
      ir_print_module(out, m);
      ok = out == stdout || (!ferror(out) && fclose(out) == 0);
    }
    if (!ok) fprintf(stderr, "mmc: error: cannot write '%s'\n", final ? final : "<stdout>");
  } else {
    CgOptions co = {.output = tmp,
                    .opt_level = o->opt_level,
                    .verbose = o->verbose,
                    .task = o->task,
                    .predicted_step_s = pred_s,
                    .predicted_device = o->device ? dev.name : NULL};
    co.emit = strcmp(emit, "obj") == 0    ? CG_EMIT_OBJ
              : strcmp(emit, "llvm") == 0 ? CG_EMIT_LLVM
              : strcmp(emit, "asm") == 0  ? CG_EMIT_ASM
                                          : CG_EMIT_EXE;
    IrModule *bk[8];
    FeProgram *bp[8];
    FeResult br[8];
    int nb = 0;
    ok = tile_buckets(o, m, bk, bp, br, &nb, &d);
    if (ok) ok = cg_compile_buckets(m, &m->train, bk, nb, &co, &d);
    for (int i = 0; i < nb; i++) {
      if (br[i].ir) ir_module_free(br[i].ir);
      fe_free(bp[i]);
    }
  }
  if (tmp) ok = finish_tmp(tmp, final, ok, &d);
  return finish(&d, p, &r, ok ? EXIT_OK : EXIT_USER);
}

/* mmc import: the .mm file, then mmc check of it against the directory;
 * without -o the file is written and checked in a temporary folder, then
 * printed. Nothing is left written on an error. */
static int cmd_import(Opts *o) {
  char model[128], tmpdir[] = "/tmp/mmc-import-XXXXXX", tmp[64];
  const char *out = o->output;
  if (!out) {
    if (!mkdtemp(tmpdir)) {
      fprintf(stderr, "mmc: import: cannot create a temporary folder in /tmp\n");
      return EXIT_USER;
    }
    snprintf(tmp, sizeof tmp, "%s/imported.mm", tmpdir);
    out = tmp;
  }
  int rc = mmc_import_write(o->file, out, model, sizeof model) ? EXIT_USER : EXIT_OK;
  if (rc == EXIT_OK) {
    Opts c = {.cmd = o->cmd, .file = out, .model = model, .init_from = o->file};
    mm_plan_flags_init(&c.flags);
    rc = cmd_check(&c);
  }
  if (rc == EXIT_OK && !o->output) {
    FILE *f = fopen(out, "r");
    int ch;
    while (f && (ch = fgetc(f)) != EOF) putchar(ch);
    if (f) fclose(f);
  }
  if (rc != EXIT_OK || !o->output) remove(out);
  if (!o->output) rmdir(tmpdir);
  return rc;
}

/* `mmc image` and `mmc video`: mmc-media beside this program (tools/mmc_media.c:
 * their decoders' libraries stay out of mmc's every start). */
static int run_media(int argc, char **argv, const Cmd *cmd) {
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  char *slash = NULL;
  if (n > 0) {
    exe[n] = 0;
    slash = strrchr(exe, '/');
  }
  if (!slash || (size_t)(slash - exe) + sizeof "/mmc-media" > sizeof exe) {
    fprintf(stderr, "mmc: cannot find the folder of this program (/proc/self/exe)\n");
    return EXIT_USER;
  }
  strcpy(slash, "/mmc-media");
  char **args = calloc((size_t)argc + 3, sizeof *args);
  if (!args) {
    fprintf(stderr, "mmc: out of memory\n");
    return EXIT_USER;
  }
  args[0] = exe;
  args[1] = (char *)cmd->name;
  args[2] = (char *)cmd->args;
  args[3] = (char *)cmd->help;
  for (int i = 2; i < argc; i++) args[i + 2] = argv[i];
  execv(exe, args);
  fprintf(stderr, "mmc: cannot run %s (mmc %s needs it beside mmc): %s\n", exe, cmd->name,
          strerror(errno));
  free(args);
  return EXIT_USER;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage_all(stderr);
    return EXIT_USAGE;
  }
  if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 ||
      strcmp(argv[1], "help") == 0) {
    usage_all(stdout);
    return EXIT_OK;
  }
  /* the reference lists the docs quote (tools/mmc_lists.h) */
  static const struct {
    const char *flag;
    void (*print)(FILE *);
  } lists[] = {{"--list-passes", mmc_list_passes},
               {"--list-ops", mmc_list_ops},
               {"--list-settings", list_settings},
               {"--version", mmc_version}};
  for (size_t i = 0; i < sizeof lists / sizeof lists[0]; i++)
    if (strcmp(argv[1], lists[i].flag) == 0) {
      if (argc > 2) {
        fprintf(stderr, "mmc: %s takes no arguments, not '%s'\n", lists[i].flag, argv[2]);
        return EXIT_USAGE;
      }
      lists[i].print(stdout);
      return fflush(stdout) == 0 && !ferror(stdout) ? EXIT_OK : EXIT_USER;
    }
  Opts o = {.opt_level = 3};
  for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
    if (strcmp(argv[1], cmds[i].name) == 0) o.cmd = &cmds[i];
  if (!o.cmd) {
    fprintf(stderr, "mmc: unknown command '%s'\n", argv[1]);
    usage_all(stderr);
    return EXIT_USAGE;
  }
  if (strcmp(o.cmd->name, "tokenize") == 0)
    return mmc_tokenize(argc - 2, argv + 2, o.cmd->args, o.cmd->help);
  if (strcmp(o.cmd->name, "data") == 0)
    return mmc_data(argc - 2, argv + 2, o.cmd->args, o.cmd->help);
  if (strcmp(o.cmd->name, "image") == 0 || strcmp(o.cmd->name, "video") == 0)
    return run_media(argc, argv, o.cmd);
  if (strcmp(o.cmd->name, "calibrate") == 0) return mmc_calibrate(argc, argv);
  int rc = parse_opts(argc, argv, &o);
  if (rc < 0) {
    if (strcmp(o.cmd->name, "check") == 0)
      rc = cmd_check(&o);
    else if (strcmp(o.cmd->name, "dump-ir") == 0)
      rc = cmd_dump_ir(&o);
    else if (strcmp(o.cmd->name, "plan") == 0)
      rc = cmd_plan(&o);
    else if (strcmp(o.cmd->name, "opt") == 0)
      rc = cmd_opt(&o);
    else if (strcmp(o.cmd->name, "compile") == 0)
      rc = cmd_compile(&o);
    else if (strcmp(o.cmd->name, "import") == 0)
      rc = cmd_import(&o);
    else
      rc = cmd_stats(&o);
  }
  for (int i = 0; i < o.noverrides; i++) free((void *)o.overrides[i].name);
  return rc;
}
