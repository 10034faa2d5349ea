/* The LLVM module of a trainer: runtime declarations, the step functions
 * (one straight-line call sequence per IR function, llm.c style), and the
 * constant model descriptor `mm_model` (runtime/model/mmrt_main.h), whose layout
 * is checked against the runtime's header at build time. */
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <llvm-c/TargetMachine.h>
#include <string.h>

#include "../ir/ir_merge.h"
#include "../passes/bucket.h"
#include "mmrt_main.h"
#include "cg_internal.h"

_Static_assert(sizeof(MmrtConv) == 19 * 4, "MmrtConv is not 19 ints");

/* ---- small helpers ---- */

bool cg_error(Cg *cg, const IrNode *n, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (n && n->loc.file)
    diag_error(cg->d, n->loc, "codegen: %s: %s", ir_ops[n->op].name, msg);
  else if (n)
    diag_error_plain(cg->d, "codegen: %s in @%s: %s", ir_ops[n->op].name, cg->f ? cg->f->name : "?",
                     msg);
  else
    diag_error_plain(cg->d, "codegen: %s", msg);
  cg->failed = true;
  return false;
}

LLVMValueRef cg_i32(Cg *cg, int64_t v) {
  return LLVMConstInt(cg->t_i32, (unsigned long long)v, true);
}
LLVMValueRef cg_i64(Cg *cg, int64_t v) {
  return LLVMConstInt(cg->t_i64, (unsigned long long)v, true);
}
LLVMValueRef cg_f32(Cg *cg, double v) {
  return LLVMConstReal(cg->t_f32, v);
}
LLVMValueRef cg_f64(Cg *cg, double v) {
  return LLVMConstReal(cg->t_f64, v);
}
LLVMValueRef cg_null(Cg *cg) {
  return LLVMConstNull(cg->t_ptr);
}

LLVMTypeRef cg_dtype(Cg *cg, IrDType t) {
  switch (t) {
    case IR_F32: return cg->t_f32;
    case IR_I32: return cg->t_i32;
    case IR_I64: return cg->t_i64;
    case IR_U8:
    case IR_BOOL: return cg->t_i8;
    case IR_BF16: return cg->t_i16; /* storage only: loops compute on it in f32 (cg_loops.c) */
    default: return NULL;           /* f16: not yet */
  }
}

static LLVMValueRef byte_ptr(Cg *cg, LLVMValueRef base, int64_t off) {
  if (off == 0) return base;
  LLVMValueRef idx = cg_i64(cg, off);
  return LLVMBuildInBoundsGEP2(cg->b, cg->t_i8, base, &idx, 1, "");
}

LLVMValueRef cg_ptr(Cg *cg, const IrValue *v) {
  MM_ASSERT(v->mem_planned && (unsigned)v->mem_arena < IR_ROLE_COUNT);
  return byte_ptr(cg, cg->bases[v->mem_arena], v->mem_offset);
}

LLVMValueRef cg_ws(Cg *cg, const IrNode *n, int64_t off) {
  MM_ASSERT(n->ws_bytes > off);
  return byte_ptr(cg, cg->bases[IR_ROLE_ACT], n->ws_offset + off);
}

LLVMValueRef cg_load_f32(Cg *cg, const IrValue *v) {
  return LLVMBuildLoad2(cg->b, cg->t_f32, cg_ptr(cg, v), "");
}

void cg_check_status(Cg *cg, LLVMValueRef r) {
  LLVMValueRef bad = LLVMBuildICmp(cg->b, LLVMIntSLT, r, cg_i32(cg, 0), "");
  LLVMBasicBlockRef ok = LLVMAppendBasicBlockInContext(cg->ctx, cg->fn, "ok");
  LLVMBuildCondBr(cg->b, bad, cg->fail_bb, ok);
  LLVMPositionBuilderAtEnd(cg->b, ok);
}

LLVMValueRef cg_const_global(Cg *cg, LLVMValueRef init, const char *name) {
  LLVMValueRef g = LLVMAddGlobal(cg->mod, LLVMTypeOf(init), name);
  LLVMSetInitializer(g, init);
  LLVMSetGlobalConstant(g, true);
  LLVMSetLinkage(g, LLVMPrivateLinkage);
  LLVMSetUnnamedAddress(g, LLVMGlobalUnnamedAddr);
  return g;
}

LLVMValueRef cg_i32_array(Cg *cg, const int32_t *v, int n) {
  LLVMValueRef *e = ARENA_ARRAY(cg->a, LLVMValueRef, n + 1);
  for (int i = 0; i < n; i++) e[i] = cg_i32(cg, v[i]);
  return cg_const_global(cg, LLVMConstArray2(cg->t_i32, e, (uint64_t)n), "shape");
}

/* The data section's keys as the trainer's flags, one word a line: for each
 * row of the section (settings.def's SET_DATA) set to other than its
 * default, --KEY (its '_' as '-') and its value. format, source and pack
 * have descriptor fields of their own (data_format, data_source, data_pack:
 * source is --data, pack a tri-state). */
static const char *data_flags(Cg *cg, const MmData *d) {
  MmTrain tr = {.data = *d};
  const char *out = "";
  for (int id = 0; id < MM_SET_COUNT; id++) {
    const MmSetDesc *r = &mm_settings[id];
    if (r->owner != MM_OWN_DATA || id == MM_SET_DATA_FORMAT || id == MM_SET_DATA_SOURCE ||
        r->kind == IR_SK_BOOL)
      continue;
    char val[64];
    const char *v = val;
    if (r->kind == IR_SK_STR) {
      v = *(const char *const *)((const char *)&tr + r->off);
      if (!v) continue;
    } else {
      double x = mm_setting_get(r, &tr);
      if (x == r->def) continue;
      if (r->kind == IR_SK_ENUM)
        v = r->names[(int)x];
      else if (r->kind == IR_SK_INT)
        snprintf(val, sizeof val, "%lld", (long long)x);
      else
        snprintf(val, sizeof val, "%.17g", x);
    }
    char flag[64] = "--";
    for (size_t k = 0; r->key[k] && k + 3 < sizeof flag; k++)
      flag[k + 2] = r->key[k] == '_' ? '-' : r->key[k], flag[k + 3] = 0;
    out = arena_printf(cg->a, "%s%s\n%s\n", out, flag, v);
  }
  return out;
}

static LLVMValueRef cstring(Cg *cg, const char *s) {
  return cg_const_global(cg, LLVMConstStringInContext2(cg->ctx, s, strlen(s), false), "str");
}

LLVMValueRef cg_intrinsic(Cg *cg, const char *name, LLVMTypeRef type, LLVMValueRef *args,
                          int nargs) {
  unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
  MM_ASSERT(id != 0);
  LLVMValueRef fn = LLVMGetIntrinsicDeclaration(cg->mod, id, &type, 1);
  LLVMTypeRef ty = LLVMIntrinsicGetType(cg->ctx, id, &type, 1);
  return LLVMBuildCall2(cg->b, ty, fn, args, (unsigned)nargs, "");
}

/* Whether the host has AVX-512: then the loops use its 512-bit vectors,
 * as the runtime's cloned kernels and mmc calibrate's vector rate do
 * (LLVM's tuning for Intel's server cores prefers 256 bits). On a 2-core
 * Xeon (AVX-512), GPT2Tiny's gelu_tanh took 0.095 ms a step against 0.117
 * in 256-bit vectors, its gradient 0.088 against 0.111. An element's
 * arithmetic is the same in any width: the same bits. */
static bool host_avx512(void) {
  static int known = -1;
  if (known < 0) {
    char *f = LLVMGetHostCPUFeatures();
    known = f && strstr(f, "+avx512f") != NULL;
    LLVMDisposeMessage(f);
  }
  return known;
}

LLVMValueRef cg_begin_fn(Cg *cg, const char *prefix, int nptr, int nextra,
                         LLVMBasicBlockRef *saved) {
  LLVMTypeRef params[CG_MAX_PTRS + 4];
  MM_ASSERT(nptr + nextra <= CG_MAX_PTRS + 4);
  for (int i = 0; i < nptr; i++) params[i] = cg->t_ptr;
  for (int i = 0; i < nextra; i++) params[nptr + i] = cg->t_i64;
  char name[64];
  snprintf(name, sizeof name, "%s.%d", prefix, cg->nfns++);
  LLVMValueRef fn = LLVMAddFunction(
      cg->mod, name, LLVMFunctionType(cg->t_void, params, (unsigned)(nptr + nextra), false));
  LLVMSetLinkage(fn, LLVMInternalLinkage);
  /* kept out of line: the step function stays a readable call sequence */
  unsigned noinline = LLVMGetEnumAttributeKindForName("noinline", 8);
  LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex,
                          LLVMCreateEnumAttribute(cg->ctx, noinline, 0));
  if (host_avx512())
    LLVMAddAttributeAtIndex(
        fn, LLVMAttributeFunctionIndex,
        LLVMCreateStringAttribute(cg->ctx, "prefer-vector-width", 19, "512", 3));
  *saved = LLVMGetInsertBlock(cg->b);
  LLVMPositionBuilderAtEnd(cg->b, LLVMAppendBasicBlockInContext(cg->ctx, fn, "entry"));
  return fn;
}

void cg_end_fn(Cg *cg, LLVMBasicBlockRef saved) {
  LLVMBuildRetVoid(cg->b);
  LLVMPositionBuilderAtEnd(cg->b, saved);
}

/* ---- step functions ---- */

static int arena_index(IrRole r) {
  switch (r) {
    case IR_ROLE_PARAM: return MMRT_ARENA_PARAM;
    case IR_ROLE_GRAD: return MMRT_ARENA_GRAD;
    case IR_ROLE_OPT: return MMRT_ARENA_OPT;
    case IR_ROLE_ACT: return MMRT_ARENA_ACT;
    case IR_ROLE_INPUT: return MMRT_ARENA_INPUT;
    default: MM_UNREACHABLE();
  }
}

/* A string constant of the module, one per distinct text (prefix tells
 * kinds from layers), for the profiler's marks. */
static LLVMValueRef prof_string(Cg *cg, const char *prefix, const char *text) {
  const char *name = arena_printf(cg->a, "mmprof.%s.%s", prefix, text);
  LLVMValueRef g = LLVMGetNamedGlobal(cg->mod, name);
  if (g) return g;
  LLVMValueRef init = LLVMConstStringInContext(cg->ctx, text, (unsigned)strlen(text), false);
  g = LLVMAddGlobal(cg->mod, LLVMTypeOf(init), name);
  LLVMSetInitializer(g, init);
  LLVMSetGlobalConstant(g, true);
  LLVMSetLinkage(g, LLVMPrivateLinkage);
  return g;
}

/* The layer an op is timed under: its stack layer ("h.3"), else the first
 * part of its module path, else "-" (the loss, the optimizer). */
static const char *prof_layer(Cg *cg, const IrNode *n) {
  if (n->group >= 0 && n->group < cg->m->groups.len) {
    const IrGroup *g = cg->m->groups.items[n->group];
    return arena_printf(cg->a, "%s.%d", g->name, n->layer);
  }
  if (!n->scope || !*n->scope) return "-";
  const char *dot = strchr(n->scope, '.');
  return dot ? arena_printf(cg->a, "%.*s", (int)(dot - n->scope), n->scope) : n->scope;
}

/* if (prof) mmrt_prof_mark(kind, layer, phase) */
static void prof_mark(Cg *cg, LLVMValueRef prof, const char *kind, const char *layer, int phase) {
  LLVMBasicBlockRef mark = LLVMAppendBasicBlockInContext(cg->ctx, cg->fn, "prof");
  LLVMBasicBlockRef cont = LLVMAppendBasicBlockInContext(cg->ctx, cg->fn, "");
  LLVMBuildCondBr(cg->b, prof, mark, cont);
  LLVMPositionBuilderAtEnd(cg->b, mark);
  LLVMValueRef null = LLVMConstNull(cg->t_ptr);
  LLVMValueRef args[3] = {kind ? prof_string(cg, "k", kind) : null,
                          layer ? prof_string(cg, "l", layer) : null, cg_i32(cg, phase)};
  cg_call(cg, "mmrt_prof_mark", args, 3);
  LLVMBuildBr(cg->b, cont);
  LLVMPositionBuilderAtEnd(cg->b, cont);
}

/* Work below which an op runs on one thread (mmrt_threads_small): FLOPs of
 * a matmul, convolution or attention (2^20: half a million multiply-adds,
 * some microseconds on one core), elements of any other op (2^15, PyTorch's
 * grain size). Collectives and the optimizer keep the state they find or
 * the program's threads. Decided by shapes alone, so a step's thread counts,
 * and its bits, are the same every run. */
static int small_op(const IrNode *n) {
  if (ir_op_is_collective(n->op) || n->op == IR_OP_BUCKET_WAIT) return -1; /* unchanged */
  if (n->op == IR_OP_ADAMW || n->op == IR_OP_SGD) return 0;
  switch (ir_ops[n->op].flop_kind) {
    case IR_FL_MATMUL:
    case IR_FL_LINEAR:
    case IR_FL_CONV:
    case IR_FL_ATTENTION:
    case IR_FL_LINEAR_W:
    case IR_FL_CONV_X:
    case IR_FL_CONV_W:
    case IR_FL_ATTENTION_BWD: return ir_flops(n) < IR_SMALL_FLOPS;
    default: break;
  }
  int64_t el = 0;
  for (int k = 0; k < n->nin; k++)
    if (ir_numel(&n->in[k]->shape) > el) el = ir_numel(&n->in[k]->shape);
  for (int k = 0; k < n->nout; k++)
    if (ir_numel(&n->out[k]->shape) > el) el = ir_numel(&n->out[k]->shape);
  return el < IR_SMALL_ELEMS;
}

/* i32 name(ptr arenas, i64 seed, ptr mesh): every node of f in order (with
 * keep: the nodes i with keep[i] only, cg_pp.c). */
LLVMValueRef cg_build_step(Cg *cg, const IrFunc *f, const char *name, bool training,
                           const unsigned char *keep) {
  LLVMTypeRef params[3] = {cg->t_ptr, cg->t_i64, cg->t_ptr};
  if (cg->suffix && cg->suffix[0]) name = arena_printf(cg->a, "%s%s", name, cg->suffix);
  LLVMValueRef fn = LLVMAddFunction(cg->mod, name, LLVMFunctionType(cg->t_i32, params, 3, false));
  cg->f = f;
  cg->fn = fn;
  cg->keep = keep;
  cg->training = training;
  cg->seed = LLVMGetParam(fn, 1);
  cg->mesh = LLVMGetParam(fn, 2);
  LLVMPositionBuilderAtEnd(cg->b, LLVMAppendBasicBlockInContext(cg->ctx, fn, "entry"));
  LLVMValueRef arenas = LLVMGetParam(fn, 0);
  for (int r = 0; r < IR_ROLE_COUNT; r++) {
    LLVMValueRef idx = cg_i64(cg, arena_index((IrRole)r));
    LLVMValueRef slot = LLVMBuildInBoundsGEP2(cg->b, cg->t_ptr, arenas, &idx, 1, "");
    cg->bases[r] = LLVMBuildLoad2(cg->b, cg->t_ptr, slot, ir_role_name((IrRole)r));
  }
  cg->step = NULL;
  for (int i = 0; i < f->inputs.len; i++) {
    const IrValue *v = f->inputs.items[i];
    if (strcmp(v->name, "step") == 0 && v->dtype == IR_F32 && v->shape.rank == 0)
      cg->step = cg_load_f32(cg, v);
  }
  ir_use_counts(f, cg->a, &cg->uses);
  cg->skip = NULL;
  cg->skip_to = -1;
  LLVMBasicBlockRef body = LLVMGetInsertBlock(cg->b);
  cg->fail_bb = LLVMAppendBasicBlockInContext(cg->ctx, fn, "fail");
  LLVMPositionBuilderAtEnd(cg->b, cg->fail_bb);
  LLVMBuildRet(cg->b, cg_i32(cg, -1));
  LLVMPositionBuilderAtEnd(cg->b, body);
  /* on a mesh, the communication counters learn the phase: forward, then
   * backward from the loss's gradient seed, update from the first
   * optimizer op */
  int bwd = -1, upd = -1, inflight = 0, small_now = 0;
  if (training) ir_train_phases(f, &bwd, &upd);
  int first = 0;
  while (keep && first < f->nodes.len && !keep[first]) first++;
  if (ir_world_size(cg->m) > 1)
    cg_call(cg, "mmrt_comm_set_phase",
            (LLVMValueRef[]){cg_i32(cg, upd >= 0 && first >= upd   ? 2
                                        : bwd >= 0 && first >= bwd ? 1
                                                                   : 0)},
            1);
  /* ZeRO-1/2's parameter gathers once a step (cg_pp.c): mmrt_mb_gathering
   * 0 skips them, 1 runs them in place, 2 runs only them and returns (a
   * pipeline's step runs every part function so first); every function
   * built with them on asks, one without any returns at once on 2 */
  bool once_here = cg->once_on;
  if (once_here) {
    LLVMValueRef g = cg_call(cg, "mmrt_mb_gathering", (LLVMValueRef[]){cg->mesh}, 1);
    cg->once_now = LLVMBuildICmp(cg->b, LLVMIntNE, g, cg_i32(cg, 0), "gather");
    LLVMBasicBlockRef only = LLVMAppendBasicBlockInContext(cg->ctx, fn, "gather_only");
    LLVMBasicBlockRef rest = LLVMAppendBasicBlockInContext(cg->ctx, fn, "step");
    LLVMBuildCondBr(cg->b, LLVMBuildICmp(cg->b, LLVMIntEQ, g, cg_i32(cg, 2), ""), only, rest);
    LLVMPositionBuilderAtEnd(cg->b, only);
    for (int i = 0; i < f->nodes.len && !cg->failed; i++) {
      if ((keep && !keep[i]) || !ir_map_get(&cg->once, f->nodes.items[i])) continue;
      cg->cur = i;
      if (!cg_lower_node(cg, f->nodes.items[i])) cg->failed = true;
    }
    LLVMBuildRet(cg->b, cg_i32(cg, 0));
    LLVMPositionBuilderAtEnd(cg->b, rest);
  }
  /* --profile: one call per step when off; the flag stays in a register */
  LLVMValueRef prof = LLVMBuildICmp(
      cg->b, LLVMIntNE, cg_call(cg, "mmrt_prof_begin", (LLVMValueRef[]){cg_i32(cg, training)}, 1),
      cg_i32(cg, 0), "prof");
  if (cg->defer_on) /* deferred dp reductions (cg_pp.c) */
    cg->defer_now = LLVMBuildICmp(cg->b, LLVMIntNE,
                                  cg_call(cg, "mmrt_mb_deferring", (LLVMValueRef[]){cg->mesh}, 1),
                                  cg_i32(cg, 0), "defer");
  for (int i = 0; i < f->nodes.len && !cg->failed; i++) {
    const IrNode *n = f->nodes.items[i];
    if (keep && !keep[i]) continue;
    if ((i == bwd || i == upd) && ir_world_size(cg->m) > 1)
      cg_call(cg, "mmrt_comm_set_phase", (LLVMValueRef[]){cg_i32(cg, i == bwd ? 1 : 2)}, 1);
    if (i <= cg->skip_to) continue; /* done by an earlier node's call (its time is that one's) */
    if (n != cg->skip) {
      int phase = ir_op_is_collective(n->op) || n->op == IR_OP_BUCKET_WAIT ? 3
                  : upd >= 0 && i >= upd                                   ? 2
                  : bwd >= 0 && i >= bwd                                   ? 1
                                                                           : 0;
      prof_mark(cg, prof, ir_ops[n->op].name, prof_layer(cg, n), phase);
    }
    for (int j = 0; j < n->nout; j++)
      if (!n->out[j]->mem_planned) {
        cg_error(cg, n, "result %d has no memory plan (run memplan)", j);
        return NULL;
      }
    if (n == cg->skip) continue;
    cg->cur = i;
    int small = small_op(n);
    if (small >= 0 && small != small_now) {
      cg_call(cg, "mmrt_threads_small", (LLVMValueRef[]){cg_i32(cg, small)}, 1);
      small_now = small;
    }
    if (n == cg->pp_seed) /* the micro-batch's label count (cg_pp.c) */
      LLVMBuildStore(cg->b, cg_call(cg, "mmrt_mb_seed", (LLVMValueRef[]){cg->mesh}, 1),
                     cg_ptr(cg, n->out[0]));
    else if (cg->defer_on && ir_map_get(&cg->defer, n)) {
      if (!cg_mb_lower_deferred(cg, n)) cg->failed = true;
    } else if (once_here && ir_map_get(&cg->once, n)) {
      if (!cg_mb_lower_once(cg, n)) cg->failed = true;
    } else if (!cg_lower_node(cg, n))
      cg->failed = true;
    /* overlapped gradient buckets or prefetched ZeRO-3 gathers in flight
     * (passes/bucket.c): let MPI progress them between the kernels */
    if (bucket_run(f, i) > 0 && async_slot(n) >= 0 && bucket_wait_index(f, async_slot(n)) > i)
      inflight++;
    else if (n->op == IR_OP_BUCKET_WAIT)
      inflight--;
    else if (inflight > 0 && !ir_op_is_collective(n->op))
      cg_call(cg, "mmrt_comm_progress", (LLVMValueRef[]){cg->mesh}, 1);
  }
  prof_mark(cg, prof, NULL, NULL, 0);
  if (small_now) cg_call(cg, "mmrt_threads_small", (LLVMValueRef[]){cg_i32(cg, 0)}, 1);
  LLVMBuildRet(cg->b, cg_i32(cg, 0));
  return cg->failed ? NULL : fn;
}

/* ---- the descriptor ---- */

typedef struct CgDecode {
  int task; /* MMRT_TASK_* */
  const IrFunc *prefill, *decode;
  LLVMValueRef prefill_fn, decode_fn;
  int64_t cache_len;
  /* the video autoencoder: @encode, @decode, @encode_first, @encode_next */
  const IrFunc *vae[4];
  LLVMValueRef vae_fn[4];
  /* the sampler: @denoise, @table, @classify (optional) */
  const IrFunc *smp[3];
  LLVMValueRef smp_fn[3];
  /* the frozen encoders: @latents, @text_features */
  const IrFunc *feat[2];
  LLVMValueRef feat_fn[2];
} CgDecode;

static int st_dtype(IrDType t) {
  switch (t) {
    case IR_F32: return MMRT_ST_F32;
    case IR_BF16: return MMRT_ST_BF16;
    case IR_F16: return MMRT_ST_F16;
    case IR_I32: return MMRT_ST_I32;
    case IR_I64: return MMRT_ST_I64;
    default: return MMRT_ST_U8;
  }
}

static int init_kind(IrInitKind k) {
  switch (k) {
    case IR_INIT_ZEROS: return MMRT_INIT_ZEROS;
    case IR_INIT_ONES: return MMRT_INIT_ONES;
    case IR_INIT_FILL: return MMRT_INIT_FILL;
    case IR_INIT_NORMAL: return MMRT_INIT_NORMAL;
    case IR_INIT_UNIFORM: return MMRT_INIT_UNIFORM;
    case IR_INIT_FAN_IN: return MMRT_INIT_FAN_IN;
    default: return MMRT_INIT_NONE;
  }
}

/* The descriptor structs, field by field from runtime/model/mmrt_desc.def: an
 * index per field (CG_MmrtTensorDesc_name, CG_MmrtModelDesc_lr, ...), its
 * kind and C size, so the LLVM struct has the C struct's fields in its
 * order; the setters below check the C type of the field they fill. */
enum {
#define MMRT_TENSOR(t, name, dims) CG_MmrtTensorDesc_##name,
#include "mmrt_desc.def"
  CG_TENSOR_FIELDS
};
enum {
#define MMRT_MODEL(t, name, dims) CG_MmrtModelDesc_##name,
#include "mmrt_desc.def"
  CG_MODEL_FIELDS
};
enum {
#define MMRT_PP_RANK(t, name, dims) CG_MmrtPpRank_##name,
#include "mmrt_desc.def"
  CG_PP_RANK_FIELDS
};
enum {
#define MMRT_PP_ACTION(t, name, dims) CG_MmrtPpAction_##name,
#include "mmrt_desc.def"
  CG_PP_ACTION_FIELDS
};
enum {
#define MMRT_PP_ROUTE(t, name, dims) CG_MmrtPpRoute_##name,
#include "mmrt_desc.def"
  CG_PP_ROUTE_FIELDS
};
typedef enum {
  DK_i64,
  DK_f64,
  DK_str,
  DK_tensors,
  DK_step,
  DK_i64s,
  DK_pp_ranks,
  DK_pp_actions,
  DK_pp_routes
} DescKind;
typedef struct DescField {
  const char *name;
  DescKind kind;
  size_t size, offset; /* in the C struct */
} DescField;
#define DESC_FIELD(S, t, name) {#name, DK_##t, sizeof(((S *)0)->name), offsetof(S, name)},
static const DescField tensor_fields[] = {
#define MMRT_TENSOR(t, name, dims) DESC_FIELD(MmrtTensorDesc, t, name)
#include "mmrt_desc.def"
};
static const DescField model_fields[] = {
#define MMRT_MODEL(t, name, dims) DESC_FIELD(MmrtModelDesc, t, name)
#include "mmrt_desc.def"
};
static const DescField pp_rank_fields[] = {
#define MMRT_PP_RANK(t, name, dims) DESC_FIELD(MmrtPpRank, t, name)
#include "mmrt_desc.def"
};
static const DescField pp_action_fields[] = {
#define MMRT_PP_ACTION(t, name, dims) DESC_FIELD(MmrtPpAction, t, name)
#include "mmrt_desc.def"
};
static const DescField pp_route_fields[] = {
#define MMRT_PP_ROUTE(t, name, dims) DESC_FIELD(MmrtPpRoute, t, name)
#include "mmrt_desc.def"
};
#undef DESC_FIELD
_Static_assert(sizeof tensor_fields / sizeof tensor_fields[0] == CG_TENSOR_FIELDS, "fields");
_Static_assert(sizeof model_fields / sizeof model_fields[0] == CG_MODEL_FIELDS, "fields");
_Static_assert(sizeof pp_rank_fields / sizeof pp_rank_fields[0] == CG_PP_RANK_FIELDS, "fields");
_Static_assert(sizeof pp_action_fields / sizeof pp_action_fields[0] == CG_PP_ACTION_FIELDS,
               "fields");
_Static_assert(sizeof pp_route_fields / sizeof pp_route_fields[0] == CG_PP_ROUTE_FIELDS, "fields");

/* f[CG_S_field] = the value, only when the C field has the setter's type */
#define SET_I64(f, S, field, v)                                                                    \
  (f[CG_##S##_##field] = _Generic(((S *)0)->field, int64_t: cg_i64)(cg, v))
#define SET_F64(f, S, field, v)                                                                    \
  (f[CG_##S##_##field] = _Generic(((S *)0)->field, double: cg_f64)(cg, v))
#define SET_PTR(f, S, field, ctype, v) (f[CG_##S##_##field] = _Generic(((S *)0)->field, ctype: (v)))
#define SET_I64S(f, S, field, vals)                                                                \
  (f[CG_##S##_##field] = _Generic(((S *)0)->field[0],                                              \
       int64_t: LLVMConstArray2)(cg->t_i64, vals, sizeof(((S *)0)->field) / sizeof(int64_t)))

static LLVMTypeRef desc_type(Cg *cg, const DescField *fields, int n) {
  LLVMTypeRef *t = ARENA_ARRAY(cg->a, LLVMTypeRef, n);
  for (int i = 0; i < n; i++) {
    const DescField *d = &fields[i];
    LLVMTypeRef one = d->kind == DK_i64 ? cg->t_i64 : d->kind == DK_f64 ? cg->t_f64 : cg->t_ptr;
    t[i] = d->size > 8 ? LLVMArrayType2(one, d->size / 8) : one;
  }
  return LLVMStructTypeInContext(cg->ctx, t, (unsigned)n, false);
}

/* The constant struct, every field set and of its declared type. */
static LLVMValueRef desc_value(LLVMTypeRef ty, const DescField *fields, LLVMValueRef *f, int n) {
  for (int i = 0; i < n; i++)
    if (!f[i] || LLVMTypeOf(f[i]) != LLVMStructGetTypeAtIndex(ty, (unsigned)i))
      mm_die(__FILE__, __LINE__, "codegen: descriptor field %s %s", fields[i].name,
             f[i] ? "has the wrong type" : "was not set");
  return LLVMConstNamedStruct(ty, f, (unsigned)n);
}

static LLVMTypeRef tensor_type(Cg *cg) {
  return desc_type(cg, tensor_fields, CG_TENSOR_FIELDS);
}

/* A tensor's global shape and, per dim, the mesh axes that split it. */
static LLVMValueRef tensor_desc(Cg *cg, LLVMTypeRef ty, const IrValue *v) {
  const CgOrig *o = cg_orig(cg, v);
  LLVMValueRef dims[MMRT_DESC_MAX_DIMS], split[MMRT_DESC_MAX_DIMS];
  for (int i = 0; i < MMRT_DESC_MAX_DIMS; i++) {
    int64_t mask = 0;
    for (int a = 0; a < IR_NAXES; a++)
      if (o->pl[a].kind == IR_PL_S && o->pl[a].dim == i && cg->m->mesh[a] > 1) mask |= 1 << a;
    dims[i] = cg_i64(cg, i < o->shape.rank ? o->shape.d[i] : 0);
    split[i] = cg_i64(cg, mask);
  }
  LLVMValueRef f[CG_TENSOR_FIELDS] = {0};
  SET_PTR(f, MmrtTensorDesc, name, const char *, cstring(cg, v->name ? v->name : "?"));
  SET_I64(f, MmrtTensorDesc, dtype, st_dtype(v->dtype));
  SET_I64(f, MmrtTensorDesc, ndim, o->shape.rank);
  SET_I64S(f, MmrtTensorDesc, shape, dims);
  SET_I64(f, MmrtTensorDesc, arena, arena_index(v->mem_arena));
  SET_I64(f, MmrtTensorDesc, offset, v->mem_offset);
  SET_I64(f, MmrtTensorDesc, init, init_kind(v->init.kind));
  SET_F64(f, MmrtTensorDesc, init_a, v->init.a);
  SET_F64(f, MmrtTensorDesc, init_b, v->init.b);
  SET_I64(f, MmrtTensorDesc, frozen, v->frozen);
  SET_I64S(f, MmrtTensorDesc, split, split);
  SET_I64(f, MmrtTensorDesc, rows, v->rows ? v->rows : o->shape.rank ? o->shape.d[0] : 1);
  const IrValue *pv = v->def && v->grad_of ? v->grad_of : v;
  IrMapSlot *pm =
      cg->m->plan.pp > 1 && !pv->def && pv->name ? ir_map_get(&cg->pp_mask, pv->name) : NULL;
  SET_I64(f, MmrtTensorDesc, pp_ranks, pm ? (int64_t)pm->i : 0);
  return desc_value(ty, tensor_fields, f, CG_TENSOR_FIELDS);
}

static LLVMValueRef tensor_array(Cg *cg, LLVMTypeRef ty, const IrValue *const *v, int n,
                                 const char *name) {
  LLVMValueRef *e = ARENA_ARRAY(cg->a, LLVMValueRef, n + 1);
  for (int i = 0; i < n; i++) e[i] = tensor_desc(cg, ty, v[i]);
  return cg_const_global(cg, LLVMConstArray2(ty, e, (uint64_t)n), name);
}

/* n records of a struct whose fields are all i64 (MmrtPpRank,
 * MmrtPpAction, MmrtPpRoute), vals[n][nf] in the fields' order, as a
 * constant array; NULL when n is 0. */
static LLVMValueRef i64_records(Cg *cg, const DescField *fields, int nf, const int64_t *vals, int n,
                                const char *name) {
  if (n <= 0) return cg_null(cg);
  LLVMTypeRef ty = desc_type(cg, fields, nf);
  LLVMValueRef *e = ARENA_ARRAY(cg->a, LLVMValueRef, n), *f = ARENA_ARRAY(cg->a, LLVMValueRef, nf);
  for (int i = 0; i < n; i++) {
    for (int k = 0; k < nf; k++) {
      MM_ASSERT(fields[k].kind == DK_i64 && fields[k].size == sizeof(int64_t));
      f[k] = cg_i64(cg, vals[(size_t)i * (size_t)nf + (size_t)k]);
    }
    e[i] = desc_value(ty, fields, f, nf);
  }
  return cg_const_global(cg, LLVMConstArray2(ty, e, (uint64_t)n), name);
}

/* v[n] as a constant i64 array; NULL when v is NULL or n is 0. */
static LLVMValueRef i64_array(Cg *cg, const int64_t *v, int n, const char *name) {
  if (!v || n <= 0) return cg_null(cg);
  LLVMValueRef *e = ARENA_ARRAY(cg->a, LLVMValueRef, n);
  for (int i = 0; i < n; i++) e[i] = cg_i64(cg, v[i]);
  return cg_const_global(cg, LLVMConstArray2(cg->t_i64, e, (uint64_t)n), name);
}

/* A pipeline's routes ([n][2]: from, to; chunk[n]: tp_chunk, NULL: 0) as
 * MmrtPpRoute records. */
static LLVMValueRef route_array(Cg *cg, const int64_t *ft, const int64_t *chunk, int n,
                                const char *name) {
  int64_t *v = ARENA_ARRAY(cg->a, int64_t, (size_t)n *CG_PP_ROUTE_FIELDS + 1);
  for (int i = 0; i < n; i++) {
    v[i * CG_PP_ROUTE_FIELDS + CG_MmrtPpRoute_from] = ft[2 * i];
    v[i * CG_PP_ROUTE_FIELDS + CG_MmrtPpRoute_to] = ft[2 * i + 1];
    v[i * CG_PP_ROUTE_FIELDS + CG_MmrtPpRoute_tp_chunk] = chunk ? chunk[i] : 0;
  }
  return i64_records(cg, pp_route_fields, CG_PP_ROUTE_FIELDS, v, n, name);
}

/* The pipeline's ranks and their schedules (MmrtPpRank, MmrtPpAction):
 * sets f's pp_rank and pp_actions, NULL without a pipeline. */
static void pp_schedule_desc(Cg *cg, const CgMb *mb, LLVMValueRef *f) {
  const IrModule *m = cg->m;
  int P = m->plan.pp > 1 && mb->sched ? m->plan.pp : 0, total = 0;
  MpPpArenas ra[MMRT_PP_MAXRANKS];
  if (P && !mp_pp_arenas(m, &cg->pp, ra, MMRT_PP_MAXRANKS)) /* the trainer refuses it */
    for (int r = 0; r < P; r++) ra[r].act = ra[r].act0 = ra[r].grad0 = -1;
  int64_t *rk = ARENA_ARRAY(cg->a, int64_t, (size_t)P *CG_PP_RANK_FIELDS + 1);
  for (int r = 0; r < P; r++) {
    int64_t *x = rk + r * CG_PP_RANK_FIELDS;
    x[CG_MmrtPpRank_first] = total, x[CG_MmrtPpRank_nactions] = mb->sched_n[r];
    x[CG_MmrtPpRank_act] = ra[r].act, x[CG_MmrtPpRank_act0] = ra[r].act0;
    x[CG_MmrtPpRank_grad0] = ra[r].grad0;
    total += mb->sched_n[r];
  }
  int64_t *ac = ARENA_ARRAY(cg->a, int64_t, (size_t)total *CG_PP_ACTION_FIELDS + 1);
  for (int i = 0; i < total; i++) {
    int64_t *x = ac + i * CG_PP_ACTION_FIELDS;
    x[CG_MmrtPpAction_kind] = mb->sched[3 * i], x[CG_MmrtPpAction_stage] = mb->sched[3 * i + 1];
    x[CG_MmrtPpAction_mb] = mb->sched[3 * i + 2];
  }
  SET_PTR(f, MmrtModelDesc, pp_rank, const MmrtPpRank *,
          i64_records(cg, pp_rank_fields, CG_PP_RANK_FIELDS, rk, P, "pp_rank"));
  SET_PTR(f, MmrtModelDesc, pp_actions, const MmrtPpAction *,
          i64_records(cg, pp_action_fields, CG_PP_ACTION_FIELDS, ac, total, "pp_actions"));
}

/* FNV-1a of what a checkpoint's tensors depend on: the model name, every
 * parameter's name, dtype, shape and role, and the inputs. */
static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  for (size_t i = 0; i < n; i++) h = (h ^ ((const unsigned char *)p)[i]) * 1099511628211ull;
  return h;
}

/* A value as the model defines it, whatever the plan: name, dtype, role and
 * global shape, a padded vocabulary (passes/vocabpad.c) by its real rows;
 * no placement and no mesh, so that a checkpoint of one plan resumes under
 * another (mmrt_ckpt_read_slice assembles each rank's piece). */
/* batch: the inputs' dim 0 is a micro-batch of a step of batch times it
 * (micro_batches; 1 otherwise), so that a checkpoint taken with
 * micro-batches or a pipeline resumes without them and back */
static uint64_t hash_value(const Cg *cg, uint64_t h, const IrValue *v, int64_t batch) {
  const CgOrig *o = cg_orig(cg, v);
  int32_t meta[3] = {(int32_t)v->dtype, (int32_t)v->role, o->shape.rank};
  int64_t shape[IR_MAX_RANK];
  for (int d = 0; d < o->shape.rank; d++) shape[d] = o->shape.d[d];
  if (o->shape.rank && v->rows) shape[0] = v->rows;
  if (o->shape.rank) shape[0] *= batch;
  h = fnv(h, v->name ? v->name : "", strlen(v->name ? v->name : "") + 1);
  h = fnv(h, meta, sizeof meta);
  return fnv(h, shape, sizeof(int64_t) * (size_t)o->shape.rank);
}

static const IrNode *last_loss(const IrFunc *f) {
  for (int i = f ? f->nodes.len - 1 : -1; i >= 0; i--) {
    const IrNode *n = f->nodes.items[i];
    if (n->op == IR_OP_CROSS_ENTROPY) return n;
  }
  return NULL;
}

/* The first `place` of a function: rows placed and the token, or 0, -1. */
static void image_place(const IrFunc *f, int64_t *rows, int64_t *token) {
  *rows = 0, *token = -1;
  for (int i = 0; f && i < f->nodes.len; i++) {
    const IrNode *n = f->nodes.items[i];
    if (n->op != IR_OP_PLACE) continue;
    *rows = n->in[1]->shape.d[1], *token = n->attrs.v[IR_ATTR_TOKEN].i;
    return;
  }
}

static int64_t result_offset(const IrFunc *f) {
  const IrValue *r = f && f->results.len ? f->results.items[0] : NULL;
  return r && r->mem_arena == IR_ROLE_ACT ? r->mem_offset : -1;
}

static bool build_desc(Cg *cg, const MmTrain *train, LLVMValueRef train_fn, LLVMValueRef eval_fn,
                       const IrFunc *ftrain, const IrFunc *feval, const MpSummary *sum,
                       const CgDecode *dec, const CgMb *mb) {
  const IrModule *m = cg->m;
  LLVMTypeRef tty = tensor_type(cg);
  /* inputs once by name, in order of first appearance */
  const IrValue **inputs = ARENA_ARRAY(cg->a, const IrValue *, 64);
  int ninputs = 0;
  for (int fi = 0; fi < m->funcs.len; fi++) {
    const IrFunc *f = m->funcs.items[fi];
    for (int i = 0; i < f->inputs.len; i++) {
      const IrValue *v = f->inputs.items[i];
      bool seen = false;
      for (int k = 0; k < ninputs; k++) seen |= strcmp(inputs[k]->name, v->name) == 0;
      if (!seen && ninputs < 64) inputs[ninputs++] = v;
    }
  }
  /* the fingerprint: params and the inputs of @forward (a generator takes
   * the trainer's checkpoints), of the model and not of the plan; the name
   * is its readable prefix, not hashed (a model extending another with a
   * parallel section alone, e.g. a stage list, is the same model:
   * runtime/io/mmrt_ckpt.c compares the hashes) */
  uint64_t h = 1469598103934665603ull;
  for (int i = 0; i < m->params.len; i++) h = hash_value(cg, h, m->params.items[i], 1);
  for (int i = 0; feval && i < feval->inputs.len; i++)
    h = hash_value(cg, h, feval->inputs.items[i],
                   m->plan.micro_batches > 1 ? m->plan.micro_batches : 1);
  char fp[128];
  snprintf(fp, sizeof fp, "%s-%016llx", m->name, (unsigned long long)h);

  int64_t batch = train && train->batch > 0 ? train->batch : 0;
  for (int i = 0; i < ninputs && !batch; i++)
    if (inputs[i]->shape.rank >= 1 && strcmp(inputs[i]->name, "lr") &&
        strcmp(inputs[i]->name, "step"))
      batch = cg_orig(cg, inputs[i])->shape.d[0] * (mb->M > 1 ? mb->M : 1);

  const IrNode *eval_ce = last_loss(feval);
  int64_t logits_rows = 0, logits_cols = 0, logits_off = -1, ignore = -100, vocab_axis = -1,
          classes = 0;
  if (eval_ce) {
    const IrValue *lg = eval_ce->in[0];
    logits_cols = lg->shape.rank ? lg->shape.d[lg->shape.rank - 1] : 1;
    logits_rows = ir_numel(&lg->shape) / logits_cols;
    const CgOrig *o = cg_orig(cg, lg);
    for (int a = 0; a < IR_NAXES; a++)
      if (o->pl[a].kind == IR_PL_S && o->pl[a].dim == lg->shape.rank - 1 && m->mesh[a] > 1)
        vocab_axis = a;
    logits_off = lg->mem_arena == IR_ROLE_ACT ? lg->mem_offset : -1;
    ignore = eval_ce->attrs.v[IR_ATTR_IGNORE].i;
    classes = ir_attrs_has(&eval_ce->attrs, IR_ATTR_VOCAB)
                  ? eval_ce->attrs.v[IR_ATTR_VOCAB].i
                  : logits_cols * (vocab_axis >= 0 ? m->mesh[vocab_axis] : 1);
  }
  int64_t img_rows, img_token;
  image_place(feval, &img_rows, &img_token);
  const IrValue *tl = ftrain && ftrain->results.len ? ftrain->results.items[0] : NULL;
  const IrValue *el = feval && feval->results.len ? feval->results.items[0] : NULL;

  LLVMValueRef arenas[MMRT_NARENAS];
  for (int r = 0; r < IR_ROLE_COUNT; r++)
    arenas[arena_index((IrRole)r)] = cg_i64(cg, sum->arena[r]);
  MmTrain dflt = {.optim = MM_OPT_ADAMW, .lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8};
  const MmTrain *t = train ? train : &dflt;
  LLVMValueRef mesh[MMRT_DESC_NAXES];
  for (int a = 0; a < MMRT_DESC_NAXES; a++) mesh[a] = cg_i64(cg, m->mesh[a]); /* the same axes */
  LLVMValueRef f[CG_MODEL_FIELDS] = {0};
#define M_I64(field, v) SET_I64(f, MmrtModelDesc, field, v)
#define M_F64(field, v) SET_F64(f, MmrtModelDesc, field, v)
  M_I64(abi_version, MMRT_ABI_VERSION);
  SET_PTR(f, MmrtModelDesc, name, const char *, cstring(cg, m->name));
  SET_PTR(f, MmrtModelDesc, fingerprint, const char *, cstring(cg, fp));
  SET_I64S(f, MmrtModelDesc, arena_bytes, arenas);
  M_I64(nparams, m->params.len);
  SET_PTR(f, MmrtModelDesc, params, const MmrtTensorDesc *,
          tensor_array(cg, tty, (const IrValue *const *)m->params.items, m->params.len, "params"));
  M_I64(ninputs, ninputs);
  SET_PTR(f, MmrtModelDesc, inputs, const MmrtTensorDesc *,
          tensor_array(cg, tty, inputs, ninputs, "inputs"));
  M_I64(train_loss_offset, tl && tl->mem_arena == IR_ROLE_ACT ? tl->mem_offset : -1);
  M_I64(eval_loss_offset, el && el->mem_arena == IR_ROLE_ACT ? el->mem_offset : -1);
  /* a gan's @train returns [loss, discriminator loss] (passes/autodiff.c) */
  const IrValue *dl =
      ftrain && ftrain->results.len == 2 && m->train.gan.ndisc ? ftrain->results.items[1] : NULL;
  M_I64(disc_loss_offset, dl && dl->mem_arena == IR_ROLE_ACT ? dl->mem_offset : -1);
  M_I64(eval_logits_offset, logits_off);
  M_I64(logits_rows, logits_rows);
  M_I64(logits_cols, logits_cols);
  M_I64(logits_vocab_axis, vocab_axis);
  M_I64(ignore_index, ignore);
  M_I64(optim, t->optim == MM_OPT_SGD ? MMRT_OPTIM_SGD : MMRT_OPTIM_ADAMW);
  M_F64(lr, t->lr);
  M_F64(beta1, t->beta1);
  M_F64(beta2, t->beta2);
  M_F64(eps, t->eps);
  M_F64(weight_decay, t->weight_decay);
  M_F64(momentum, t->momentum);
  M_F64(clip, t->clip);
  M_I64(lr_sched, t->lr_sched == MM_LR_COSINE   ? MMRT_LR_COSINE
                  : t->lr_sched == MM_LR_LINEAR ? MMRT_LR_LINEAR
                                                : MMRT_LR_CONSTANT);
  M_I64(warmup, t->warmup);
  M_I64(steps, t->steps);
  M_F64(min_lr, t->min_lr);
  M_I64(batch, batch);
  SET_I64S(f, MmrtModelDesc, mesh, mesh);
  M_I64(pp_one0, ir_one_rank_first_stage(m) ? 1 : 0);
  M_I64(zero_node, m->plan.zero_across ? m->plan.ranks_per_node / (m->plan.tp * m->plan.cp) : 0);
  M_I64(lora_rank, t->lora.rank);
  M_F64(lora_alpha, t->lora.alpha);
  M_I64(precision, t->precision == MM_PREC_BF16 ? 1 : 0);
  const MmData *dd = &t->data;
  SET_PTR(f, MmrtModelDesc, data_source, const char *, cstring(cg, dd->source ? dd->source : ""));
  const bool text = dd->source && (dd->format == MM_FMT_AUTO ||
                                   dd->format == MM_FMT_TEXT); /* the text keys' defaults */
  M_I64(data_pack, !text ? 0 : dd->pack ? 1 : -1);
  SET_PTR(f, MmrtModelDesc, data_flags, const char *, cstring(cg, data_flags(cg, &t->data)));
  SET_PTR(f, MmrtModelDesc, data_format, const char *,
          cstring(cg, dd->format != MM_FMT_AUTO ? mm_data_format_names[dd->format]
                      : dd->source              ? mm_data_format_names[MM_FMT_TEXT]
                                                : ""));
  SET_PTR(f, MmrtModelDesc, train_step, MmrtStepFn, train_fn ? train_fn : cg_null(cg));
  SET_PTR(f, MmrtModelDesc, eval_step, MmrtStepFn, eval_fn ? eval_fn : cg_null(cg));
  M_I64(task, dec->task);
  M_I64(image_tokens, img_rows);
  M_I64(image_token, img_token);
  SET_PTR(f, MmrtModelDesc, prefill_step, MmrtStepFn,
          dec->prefill_fn ? dec->prefill_fn : cg_null(cg));
  SET_PTR(f, MmrtModelDesc, decode_step, MmrtStepFn, dec->decode_fn ? dec->decode_fn : cg_null(cg));
  M_I64(prefill_logits_offset, result_offset(dec->prefill));
  M_I64(decode_logits_offset, result_offset(dec->decode));
  M_I64(cache_len, dec->cache_len);
  M_I64(vocab, logits_cols);
  M_I64(logits_classes, classes);
  M_I64(micro_batches, mb->M > 1 ? mb->M : 1);
  SET_PTR(f, MmrtModelDesc, update_step, MmrtStepFn, mb->upd ? mb->upd : cg_null(cg));
  M_I64(naccum, mb->naccum);
  M_I64(pp, m->plan.pp);
  M_F64(predicted_step_s, cg->opts ? cg->opts->predicted_step_s : 0);
  SET_PTR(f, MmrtModelDesc, predicted_device, const char *,
          cstring(cg, cg->opts && cg->opts->predicted_device ? cg->opts->predicted_device : ""));
  M_I64(pp_stages, m->plan.pp > 1 ? cg->pp.nstages : 1);
  pp_schedule_desc(cg, mb, f);
  LLVMValueRef fns[MMRT_PP_MAXFN];
  for (int i = 0; i < MMRT_PP_MAXFN; i++) fns[i] = mb->pp_fn[i] ? mb->pp_fn[i] : cg_null(cg);
  f[CG_MmrtModelDesc_pp_fn] = _Generic(((MmrtModelDesc *)0)->pp_fn[0],
      MmrtStepFn: LLVMConstArray2)(cg->t_ptr, fns, MMRT_PP_MAXFN);
  LLVMValueRef upds[MMRT_PP_MAXRANKS];
  for (int i = 0; i < MMRT_PP_MAXRANKS; i++) upds[i] = mb->pp_upd[i] ? mb->pp_upd[i] : cg_null(cg);
  f[CG_MmrtModelDesc_pp_update] = _Generic(((MmrtModelDesc *)0)->pp_update[0],
      MmrtStepFn: LLVMConstArray2)(cg->t_ptr, upds, MMRT_PP_MAXRANKS);
  LLVMValueRef efns[MMRT_PP_MAXSTAGES];
  for (int i = 0; i < MMRT_PP_MAXSTAGES; i++)
    efns[i] = mb->pp_eval_fn[i] ? mb->pp_eval_fn[i] : cg_null(cg);
  f[CG_MmrtModelDesc_pp_eval_fn] = _Generic(((MmrtModelDesc *)0)->pp_eval_fn[0],
      MmrtStepFn: LLVMConstArray2)(cg->t_ptr, efns, MMRT_PP_MAXSTAGES);
  M_I64(pp_eval_nxfer, mb->neval_xfer);
  SET_PTR(f, MmrtModelDesc, pp_eval_xfer, const MmrtTensorDesc *,
          mb->neval_xfer ? tensor_array(cg, tty, mb->eval_xfer, mb->neval_xfer, "pp_eval_xfer")
                         : cg_null(cg));
  SET_PTR(f, MmrtModelDesc, pp_eval_route, const MmrtPpRoute *,
          route_array(cg, mb->eval_route, NULL, mb->neval_xfer, "pp_eval_route"));
  M_I64(pp_nxfer, mb->nxfer);
  SET_PTR(f, MmrtModelDesc, pp_xfer, const MmrtTensorDesc *,
          mb->nxfer ? tensor_array(cg, tty, mb->xfer, mb->nxfer, "pp_xfer") : cg_null(cg));
  SET_PTR(f, MmrtModelDesc, pp_xfer_route, const MmrtPpRoute *,
          route_array(cg, mb->route, mb->tp_chunk, mb->nxfer, "pp_xfer_route"));
  SET_PTR(f, MmrtModelDesc, pp_xfer_how, const int64_t *,
          i64_array(cg, mb->xfer_how, mb->nxfer, "pp_xfer_how"));
  SET_PTR(f, MmrtModelDesc, pp_xfer_src, const int64_t *,
          i64_array(cg, mb->xfer_src, mb->nxfer, "pp_xfer_src"));
  SET_PTR(f, MmrtModelDesc, pp_accum_stage, const int64_t *,
          i64_array(cg, mb->accum_stage, mb->naccum, "pp_accum_stage"));
  SET_PTR(f, MmrtModelDesc, accum, const MmrtTensorDesc *,
          mb->naccum ? tensor_array(cg, tty, mb->accum, mb->naccum, "accum") : cg_null(cg));
  M_I64(ndefer, mb->ndefer);
  SET_PTR(f, MmrtModelDesc, defer, const MmrtTensorDesc *,
          mb->ndefer ? tensor_array(cg, tty, mb->defer, mb->ndefer, "defer") : cg_null(cg));
  SET_PTR(f, MmrtModelDesc, accum_deferred, const int64_t *,
          i64_array(cg, mb->ndefer ? mb->accum_deferred : NULL, mb->naccum, "accum_deferred"));
  SET_PTR(f, MmrtModelDesc, defer_stage, const int64_t *,
          i64_array(cg, mb->defer_stage, mb->ndefer, "defer_stage"));
  SET_PTR(f, MmrtModelDesc, defer_home, const int64_t *,
          i64_array(cg, mb->defer_home, mb->ndefer, "defer_home"));
  M_I64(gather_once, mb->nonce);
  SET_PTR(f, MmrtModelDesc, vae_encode_step, MmrtStepFn,
          dec->vae_fn[0] ? dec->vae_fn[0] : cg_null(cg));
  SET_PTR(f, MmrtModelDesc, vae_decode_step, MmrtStepFn,
          dec->vae_fn[1] ? dec->vae_fn[1] : cg_null(cg));
  SET_PTR(f, MmrtModelDesc, vae_first_step, MmrtStepFn,
          dec->vae_fn[2] ? dec->vae_fn[2] : cg_null(cg));
  SET_PTR(f, MmrtModelDesc, vae_next_step, MmrtStepFn,
          dec->vae_fn[3] ? dec->vae_fn[3] : cg_null(cg));
  const IrFunc *const *vf = dec->vae;
  const IrValue *vt[MMRT_VAE_NTENSORS];
  int nvt = 0, ncache = 0;
  if (vf[0] && vf[1]) {
    vt[MMRT_VAE_LATENTS] = vf[0]->results.items[0];
    vt[MMRT_VAE_DEC_IN] = vf[1]->inputs.items[0];
    vt[MMRT_VAE_CLIPS] = vf[1]->results.items[0];
    nvt = MMRT_VAE_CHUNK0;
    if (vf[2] && vf[3]) {
      vt[MMRT_VAE_CHUNK0] = vf[2]->inputs.items[0];
      vt[MMRT_VAE_FIRST_LAT] = vf[2]->results.items[0];
      vt[MMRT_VAE_CHUNK] = vf[3]->inputs.items[0];
      vt[MMRT_VAE_NEXT_LAT] = vf[3]->results.items[0];
      nvt = MMRT_VAE_NTENSORS;
      ncache = vf[3]->results.len - 1;
    }
  }
  const IrValue **vc = ARENA_ARRAY(cg->a, const IrValue *, 3 * ncache + 1);
  for (int i = 0; i < ncache; i++) {
    vc[3 * i] = vf[3]->inputs.items[1 + i];
    vc[3 * i + 1] = vf[2]->results.items[1 + i];
    vc[3 * i + 2] = vf[3]->results.items[1 + i];
  }
  SET_PTR(f, MmrtModelDesc, vae_tensors, const MmrtTensorDesc *,
          nvt ? tensor_array(cg, tty, vt, nvt, "vae_tensors") : cg_null(cg));
  M_I64(vae_ncaches, ncache);
#define SET_STEP(name, fn) SET_PTR(f, MmrtModelDesc, name, MmrtStepFn, (fn) ? (fn) : cg_null(cg))
  SET_STEP(sample_denoise_step, dec->smp_fn[0]);
  SET_STEP(sample_table_step, dec->smp_fn[1]);
  SET_STEP(sample_classify_step, dec->smp_fn[2]);
#undef SET_STEP
  const IrValue *st[MMRT_SAMPLE_NTENSORS];
  bool smp = dec->smp[0] && dec->smp[1] && vf[1];
  if (smp) {
    for (int i = 0; i < 3; i++) st[MMRT_SAMPLE_X + i] = dec->smp[0]->inputs.items[i];
    st[MMRT_SAMPLE_PRED] = dec->smp[0]->results.items[0];
    st[MMRT_SAMPLE_TABLE] = dec->smp[1]->results.items[0];
    st[MMRT_SAMPLE_DEC_IN] = vf[1]->inputs.items[0];
    st[MMRT_SAMPLE_CLIPS] = vf[1]->results.items[0];
    if (dec->smp[2]) {
      st[MMRT_SAMPLE_FRAMES] = dec->smp[2]->inputs.items[0];
      st[MMRT_SAMPLE_LOGITS] = dec->smp[2]->results.items[0];
    }
  }
  SET_PTR(f, MmrtModelDesc, sample_tensors, const MmrtTensorDesc *,
          smp ? tensor_array(cg, tty, st, dec->smp[2] ? MMRT_SAMPLE_NTENSORS : MMRT_SAMPLE_FRAMES,
                             "sample_tensors")
              : cg_null(cg));
  SET_PTR(f, MmrtModelDesc, vae_caches, const MmrtTensorDesc *,
          ncache ? tensor_array(cg, tty, vc, 3 * ncache, "vae_caches") : cg_null(cg));
  SET_PTR(f, MmrtModelDesc, feat_latents_step, MmrtStepFn,
          dec->feat_fn[0] ? dec->feat_fn[0] : cg_null(cg));
  SET_PTR(f, MmrtModelDesc, feat_text_step, MmrtStepFn,
          dec->feat_fn[1] ? dec->feat_fn[1] : cg_null(cg));
  const IrValue *ft[MMRT_FEAT_NTENSORS];
  if (dec->feat_fn[0] && dec->feat_fn[1]) {
    ft[MMRT_FEAT_VIDEO] = dec->feat[0]->inputs.items[0];
    ft[MMRT_FEAT_LATENTS] = dec->feat[0]->results.items[0];
    ft[MMRT_FEAT_TEXT] = dec->feat[1]->inputs.items[0];
    ft[MMRT_FEAT_TEXT_FEATURES] = dec->feat[1]->results.items[0];
  }
  SET_PTR(f, MmrtModelDesc, feat_tensors, const MmrtTensorDesc *,
          dec->feat_fn[0] && dec->feat_fn[1]
              ? tensor_array(cg, tty, ft, MMRT_FEAT_NTENSORS, "feat_tensors")
              : cg_null(cg));
#undef M_I64
#undef M_F64
  LLVMTypeRef dty = desc_type(cg, model_fields, CG_MODEL_FIELDS);
  LLVMValueRef g = LLVMAddGlobal(
      cg->mod, dty,
      cg->suffix && cg->suffix[0] ? arena_printf(cg->a, "mm_model%s", cg->suffix) : "mm_model");
  LLVMSetInitializer(g, desc_value(dty, model_fields, f, CG_MODEL_FIELDS));
  LLVMSetGlobalConstant(g, true);
  cg->desc = g;
  return true;
}

/* ---- one rank's program ---- */

const CgOrig *cg_orig(const Cg *cg, const IrValue *v) {
  const IrMapSlot *s = ir_map_get(&cg->orig, v);
  if (s) return s->p;
  static _Thread_local CgOrig own;
  own.shape = v->shape;
  memcpy(own.pl, v->pl, sizeof own.pl);
  return &own;
}

int cg_split_axes(const Cg *cg, const IrValue *v) {
  const CgOrig *o = cg_orig(cg, v);
  int mask = 0;
  for (int a = 0; a < IR_NAXES; a++)
    if (o->pl[a].kind == IR_PL_S && cg->m->mesh[a] > 1) mask |= 1 << a;
  return mask;
}

static void localize_value(Cg *cg, IrValue *v) {
  if (ir_map_get(&cg->orig, v)) return;
  CgOrig *o = ARENA_NEW(cg->a, CgOrig);
  o->shape = v->shape;
  memcpy(o->pl, v->pl, sizeof o->pl);
  ir_map_put(&cg->orig, v)->p = o;
  ir_local_shape(cg->m, v->pl, &o->shape, &v->shape);
  for (int a = 0; a < IR_NAXES; a++) v->pl[a] = (IrPlacement){IR_PL_B, 0};
}

/* Every value becomes its rank's piece (shape attributes of results too),
 * with the global shape and placement kept in cg->orig; the module is the
 * codegen's to change from here on. A one-rank module is left alone. */
static void localize(Cg *cg, IrModule *m) {
  if (ir_world_size(m) <= 1) return;
  for (int i = 0; i < m->params.len; i++) localize_value(cg, m->params.items[i]);
  for (int fi = 0; fi < m->funcs.len; fi++) {
    IrFunc *f = m->funcs.items[fi];
    for (int i = 0; i < f->inputs.len; i++) localize_value(cg, f->inputs.items[i]);
    for (int i = 0; i < f->nodes.len; i++) {
      IrNode *n = f->nodes.items[i];
      for (int j = 0; j < n->nout; j++) localize_value(cg, n->out[j]);
      IrAttrVal *s = &n->attrs.v[IR_ATTR_SHAPE];
      if (ir_attrs_has(&n->attrs, IR_ATTR_SHAPE) && n->nout >= 1 &&
          s->nints == n->out[0]->shape.rank) {
        int64_t *ints = ARENA_ARRAY(&m->arena, int64_t, s->nints + 1);
        memcpy(ints, n->out[0]->shape.d, sizeof(int64_t) * (size_t)s->nints);
        s->ints = ints;
      }
    }
  }
}

/* ---- the whole module ---- */

bool cg_emit_module(Cg *cg, const CgOptions *o); /* cg_emit.c */

/* Builds m's step functions and its descriptor into cg's LLVM module
 * (cg->suffix names a tile bucket's). */
static bool build_program(Cg *cg, IrModule *m, const MmTrain *train, const CgOptions *o) {
  Diag *d = cg->d;
  MpSummary sum;
  char err[256];
  if (!mp_summarize(m, &sum, err, sizeof err)) {
    diag_error_plain(d, "codegen: %s", err);
    return false;
  }
  ir_map_init(&cg->orig, cg->a, false);
  IrFunc *ftrain = ir_module_func(m, "train"), *feval = ir_module_func(m, "forward");
  LLVMValueRef train_fn = NULL, eval_fn = NULL;
  bool ok = !(ftrain && m->plan.pp > 1) || cg_pp_assign(cg, ftrain, feval);
  localize(cg, m);
  if (!feval) {
    diag_error_plain(d, "codegen: the module has no @forward function");
    ok = false;
  }
  if (ok) eval_fn = cg_build_step(cg, feval, "mm_eval_step", false, NULL);
  CgMb mb = {.M = 1};
  if (ok && eval_fn && ftrain && m->plan.pp > 1) {
    if (cg_pp_build(cg, ftrain, &mb) && !cg_pp_eval_build(cg, feval, &mb)) eval_fn = NULL;
    if (eval_fn) train_fn = mb.fb;
  } else if (ok && eval_fn && ftrain && m->plan.micro_batches > 1) {
    if (cg_mb_build(cg, ftrain, &mb)) train_fn = mb.fb;
  } else if (ok && eval_fn && ftrain) {
    train_fn = cg_build_step(cg, ftrain, "mm_train_step", true, NULL);
  }
  ok = ok && eval_fn && (!ftrain || train_fn) && !cg->failed;
  CgDecode dec = {.task = o->task,
                  .prefill = ir_module_func(m, "prefill"),
                  .decode = ir_module_func(m, "decode")};
  if (ok && (o->task == MMRT_TASK_GENERATE || o->task == MMRT_TASK_EVAL)) {
    if (!dec.prefill || !dec.decode) {
      diag_error_plain(d, "codegen: the generate and eval tasks need @prefill and @decode");
      ok = false;
    }
    if (ok) dec.prefill_fn = cg_build_step(cg, dec.prefill, "mm_prefill_step", false, NULL);
    if (ok && dec.prefill_fn)
      dec.decode_fn = cg_build_step(cg, dec.decode, "mm_decode_step", false, NULL);
    ok = ok && dec.prefill_fn && dec.decode_fn && !cg->failed;
    for (int i = 0; ok && i < dec.prefill->inputs.len; i++) {
      const IrValue *v = dec.prefill->inputs.items[i];
      size_t n = strlen(v->name);
      if (n > 8 && strcmp(v->name + n - 8, ".k_cache") == 0) dec.cache_len = v->shape.d[1];
    }
  }
  static const char *const vae_funcs[4] = {"encode", "decode", "encode_first", "encode_next"};
  static const char *const vae_syms[4] = {"mm_vae_encode_step", "mm_vae_decode_step",
                                          "mm_vae_first_step", "mm_vae_next_step"};
  for (int k = 0; ok && k < 4; k++) {
    dec.vae[k] = ir_module_func(m, vae_funcs[k]);
    if (dec.vae[k]) dec.vae_fn[k] = cg_build_step(cg, dec.vae[k], vae_syms[k], false, NULL);
    ok = !dec.vae[k] || (dec.vae_fn[k] && !cg->failed);
  }
  static const char *const smp_funcs[3] = {"denoise", "table", "classify"};
  static const char *const smp_syms[3] = {"mm_sample_denoise_step", "mm_sample_table_step",
                                          "mm_sample_classify_step"};
  for (int k = 0; ok && o->task == MMRT_TASK_SAMPLE && k < 3; k++) {
    dec.smp[k] = ir_module_func(m, smp_funcs[k]);
    if (dec.smp[k]) dec.smp_fn[k] = cg_build_step(cg, dec.smp[k], smp_syms[k], false, NULL);
    ok = !dec.smp[k] || (dec.smp_fn[k] && !cg->failed);
  }
  static const char *const feat_funcs[2] = {"latents", "text_features"};
  static const char *const feat_syms[2] = {"mm_feat_latents_step", "mm_feat_text_step"};
  for (int k = 0; ok && k < 2; k++) {
    dec.feat[k] = ir_module_func(m, feat_funcs[k]);
    if (dec.feat[k]) dec.feat_fn[k] = cg_build_step(cg, dec.feat[k], feat_syms[k], false, NULL);
    ok = !dec.feat[k] || (dec.feat_fn[k] && !cg->failed);
  }
  if (ok && o->task == MMRT_TASK_EXTRACT && !(dec.feat_fn[0] && dec.feat_fn[1])) {
    diag_error_plain(d, "codegen: the extract task needs @latents and @text_features");
    ok = false;
  }
  if (ok && dec.vae[2] && dec.vae[3] &&
      (dec.vae[2]->results.len != dec.vae[3]->results.len ||
       dec.vae[3]->inputs.len != dec.vae[3]->results.len)) {
    diag_error_plain(d,
                     "codegen: @encode_first returns %d caches and @encode_next %d from %d cache "
                     "inputs: the chunked encoder's causal_pad calls differ between the chunks",
                     dec.vae[2]->results.len - 1, dec.vae[3]->results.len - 1,
                     dec.vae[3]->inputs.len - 1);
    ok = false;
  }
  /* under a pipeline a rank holds its stages' parameters only: a function
   * that reads them but @train and @forward (which run stage by stage) would
   * read what the rank does not hold */
  static const char *const whole[] = {"prefill",     "decode",       "encode", "encode_first",
                                      "encode_next", "denoise",      "table",  "classify",
                                      "latents",     "text_features"};
  for (size_t k = 0; ok && m->plan.pp > 1 && k < sizeof whole / sizeof *whole; k++) {
    const IrFunc *g = ir_module_func(m, whole[k]);
    if (!g) continue;
    diag_error_plain(d,
                     "codegen: pipeline (pp = %d): model %s's @%s reads the parameters of every "
                     "stage, and a pp rank holds its stages' only (only @train and @forward run "
                     "stage by stage); compile it without --pp",
                     m->plan.pp, m->name, whole[k]);
    ok = false;
  }
  if (ok) ok = build_desc(cg, train, train_fn, eval_fn, ftrain, feval, &sum, &dec, &mb);
  pp_assign_free(&cg->pp);
  pp_assign_free(&cg->pp_eval);
  return ok;
}

bool cg_compile(IrModule *m, const MmTrain *train, const CgOptions *o, Diag *d) {
  return cg_compile_buckets(m, train, NULL, 0, o, d);
}

bool cg_compile_buckets(IrModule *m, const MmTrain *train, IrModule *const *buckets, int nbuckets,
                        const CgOptions *o, Diag *d) {
  Arena a;
  arena_init(&a);
  Cg cg = {.d = d, .m = m, .a = &a, .opts = o, .suffix = ""};
  cg.ctx = LLVMContextCreate();
  cg.mod = LLVMModuleCreateWithNameInContext(m->name, cg.ctx);
  cg.b = LLVMCreateBuilderInContext(cg.ctx);
  cg.t_void = LLVMVoidTypeInContext(cg.ctx);
  cg.t_i1 = LLVMInt1TypeInContext(cg.ctx);
  cg.t_i8 = LLVMInt8TypeInContext(cg.ctx);
  cg.t_i16 = LLVMInt16TypeInContext(cg.ctx);
  cg.t_i32 = LLVMInt32TypeInContext(cg.ctx);
  cg.t_i64 = LLVMInt64TypeInContext(cg.ctx);
  cg.t_f32 = LLVMFloatTypeInContext(cg.ctx);
  cg.t_f64 = LLVMDoubleTypeInContext(cg.ctx);
  cg.t_ptr = LLVMPointerTypeInContext(cg.ctx, 0);
  bool ok = build_program(&cg, m, train, o);
  /* tile buckets (docs/architecture.md "Data"): the same model at smaller
   * tile counts, each its own steps and descriptor mm_model_bI, listed in
   * mm_tile_buckets[mm_tile_nbuckets] for the runtime to pick per step */
  LLVMValueRef *descs = ARENA_ARRAY(&a, LLVMValueRef, nbuckets + 1);
  for (int i = 0; ok && i < nbuckets; i++) {
    Arena ba;
    arena_init(&ba);
    Cg cb = cg;
    cb.m = buckets[i], cb.a = &ba, cb.suffix = arena_printf(&a, "_b%d", i + 1);
    cb.nfns = cg.nfns, cb.desc = NULL, cb.failed = false;
    memset(&cb.orig, 0, sizeof cb.orig);
    memset(&cb.pp, 0, sizeof cb.pp), memset(&cb.pp_eval, 0, sizeof cb.pp_eval);
    memset(&cb.uses, 0, sizeof cb.uses);
    ok = build_program(&cb, buckets[i], &buckets[i]->train, o);
    cg.nfns = cb.nfns;
    descs[i] = cb.desc;
    arena_free(&ba);
  }
  if (ok && nbuckets > 0) {
    LLVMValueRef arr = LLVMConstArray2(cg.t_ptr, descs, (uint64_t)nbuckets);
    LLVMValueRef g = LLVMAddGlobal(cg.mod, LLVMTypeOf(arr), "mm_tile_buckets");
    LLVMSetInitializer(g, arr);
    LLVMSetGlobalConstant(g, true);
    LLVMValueRef n = LLVMAddGlobal(cg.mod, cg.t_i32, "mm_tile_nbuckets");
    LLVMSetInitializer(n, cg_i32(&cg, nbuckets));
    LLVMSetGlobalConstant(n, true);
  }
  if (ok) ok = cg_emit_module(&cg, o);
  LLVMDisposeBuilder(cg.b);
  LLVMDisposeModule(cg.mod);
  LLVMContextDispose(cg.ctx);
  arena_free(&a);
  return ok;
}
