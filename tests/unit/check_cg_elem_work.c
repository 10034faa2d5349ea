/* The cost model's instructions per element (passes/cost.c cost_elem_work)
 * against the code codegen emits. For each elementwise op codegen lowers as
 * a loop, a module of one fused node `t0 = op(i0, ...)` on f32 goes through
 * memplan and codegen (cg_compile, --emit llvm at -O0: the element's code as
 * codegen/cg_loops.c built it); the loop function's stored value is walked
 * back to the loads it comes from and its instructions counted by cost.c's
 * rule: 1 each, except fdiv and llvm.sqrt 8 and bitcast 0. The count must
 * equal the table's entry; an op without one must take no more than its
 * model FLOPs. An op whose element calls a function (log, pow) is the
 * table's estimate of that call: printed, not counted. One line per op. */
#include <check.h>
#include <llvm-c/Core.h>
#include <llvm-c/IRReader.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/cg.h"
#include "ir/ir.h"
#include "passes/cost.h"
#include "passes/pass.h"
#include "tmpdir_fixture.h"

/* The ops counted: the elementwise ones but fused (its instructions are
 * the others), cast and detach (no arithmetic of their own) and dropout (a
 * call of mmrt_rng_uniform_at in @train, nothing in @forward: the table's
 * estimate). */
static bool counted_op(IrOp op) {
  return (ir_ops[op].flags & OPF_ELEMWISE) && op != IR_OP_FUSED && op != IR_OP_CAST &&
         op != IR_OP_DETACH && op != IR_OP_DROPOUT;
}

typedef struct Walk {
  LLVMValueRef seen[1024];
  int nseen;
  char call[128]; /* the first function called (not a counted intrinsic), or "" */
} Walk;

static bool starts(const char *s, const char *p) {
  return strncmp(s, p, strlen(p)) == 0;
}

/* cost.c's rule for one instruction */
static int instr_work(LLVMValueRef v, Walk *w) {
  switch (LLVMGetInstructionOpcode(v)) {
    case LLVMFDiv: return 8;
    case LLVMBitCast: return 0; /* the same bits seen as another type */
    case LLVMCall: {
      size_t len;
      const char *name = LLVMGetValueName2(LLVMGetCalledValue(v), &len);
      if (starts(name, "llvm.sqrt.")) return 8;
      static const char *const one[] = {"llvm.fabs.",   "llvm.copysign.", "llvm.floor.",
                                        "llvm.minnum.", "llvm.maxnum.",   "llvm.fma.",
                                        "llvm.fmuladd."};
      for (size_t k = 0; k < sizeof one / sizeof *one; k++)
        if (starts(name, one[k])) return 1;
      if (!w->call[0]) snprintf(w->call, sizeof w->call, "%s", name);
      return 0;
    }
    default: return 1;
  }
}

/* The instructions v is computed by, back to the loads (and the loop's
 * index), each once. */
static int walk(LLVMValueRef v, Walk *w) {
  if (!LLVMIsAInstruction(v)) return 0;
  for (int i = 0; i < w->nseen; i++)
    if (w->seen[i] == v) return 0;
  ck_assert_int_lt(w->nseen, (int)(sizeof w->seen / sizeof *w->seen));
  w->seen[w->nseen++] = v;
  LLVMOpcode oc = LLVMGetInstructionOpcode(v);
  if (oc == LLVMLoad || oc == LLVMPHI) return 0;
  int n = instr_work(v, w);
  for (int k = 0; k < LLVMGetNumOperands(v); k++) n += walk(LLVMGetOperand(v, k), w);
  return n;
}

/* The element's count in the loop function of the LLVM IR file at path
 * (w->call set when it calls a function). */
static int count_file(const char *path, Walk *w) {
  LLVMContextRef ctx = LLVMContextCreate();
  LLVMMemoryBufferRef buf;
  LLVMModuleRef mod;
  char *msg = NULL;
  ck_assert_msg(!LLVMCreateMemoryBufferWithContentsOfFile(path, &buf, &msg), "%s: %s", path, msg);
  ck_assert_msg(!LLVMParseIRInContext(ctx, buf, &mod, &msg), "%s: %s", path, msg);
  LLVMValueRef store = NULL;
  int nloops = 0;
  for (LLVMValueRef f = LLVMGetFirstFunction(mod); f; f = LLVMGetNextFunction(f)) {
    size_t len;
    if (!starts(LLVMGetValueName2(f, &len), "loop.") || !LLVMCountBasicBlocks(f)) continue;
    nloops++;
    for (LLVMBasicBlockRef b = LLVMGetFirstBasicBlock(f); b; b = LLVMGetNextBasicBlock(b))
      for (LLVMValueRef i = LLVMGetFirstInstruction(b); i; i = LLVMGetNextInstruction(i))
        if (LLVMGetInstructionOpcode(i) == LLVMStore) {
          ck_assert_msg(!store, "%s: the loop stores twice", path);
          store = i;
        }
  }
  ck_assert_msg(nloops == 1 && store, "%s: %d loop functions, %s store", path, nloops,
                store ? "a" : "no");
  memset(w, 0, sizeof *w);
  int n = walk(LLVMGetOperand(store, 0), w);
  LLVMDisposeModule(mod);
  LLVMContextDispose(ctx);
  return n;
}

#define PL "{dp:B, cp:B, tp:B}"

/* codegen's instructions for one element of op on f32 (-1 and w->call:
 * the element calls a function) */
static int codegen_count(IrOp op, Walk *w) {
  const IrOpInfo *info = &ir_ops[op];
  /* pow_scalar: 2, 1 and 0.5 are inline (a multiply, nothing, a square
   * root), any other exponent a call of llvm.pow, which the table charges */
  bool value = op == IR_OP_POW_SCALAR || op == IR_OP_ADD_SCALAR || op == IR_OP_MUL_SCALAR;
  const char *attrs = value ? " {value = 3}" : "";
  char prog[128], text[1024];
  snprintf(prog, sizeof prog, "t0 = %s(i0%s)%s", info->name, info->min_in == 2 ? ", i1" : "",
           attrs);
  snprintf(text, sizeof text,
           "module @t mesh(dp = 1, cp = 1, tp = 1)\n"
           "func @forward(%%x : f32[64]" PL ", %%y : f32[64]" PL ") {\n"
           "  %%0 = fused(%%x%s) {prog = \"%s\"} : f32[64]" PL "\n"
           "  return %%0\n"
           "}\n",
           info->min_in == 2 ? ", %y" : "", prog);
  ck_assert_int_le(info->min_in, 2);
  Diag d;
  char *dbuf = NULL;
  size_t dlen = 0;
  diag_init(&d);
  d.out = open_memstream(&dbuf, &dlen);
  IrModule *m = ir_parse(&d, diag_add_buffer(&d, "t.mmir", text, strlen(text)));
  PassCtx cx = {.d = &d};
  bool ok = m && pass_run(m, &cx, pass_index("memplan"));
  char ll[300];
  snprintf(ll, sizeof ll, "%s/%s.ll", tmpdir, info->name);
  CgOptions o = {.emit = CG_EMIT_LLVM, .output = ll, .opt_level = 0};
  ok = ok && cg_compile(m, &m->train, &o, &d);
  fflush(d.out);
  ck_assert_msg(ok, "%s: codegen failed: %s", info->name, dbuf ? dbuf : "");
  ir_module_free(m);
  fclose(d.out);
  free(dbuf);
  diag_free(&d);
  int n = count_file(ll, w);
  return w->call[0] ? -1 : n;
}

static void setup(void) {
  tmpdir_make("mmc_elem_work");
}

static void teardown(void) {
  tmpdir_remove();
}

static IrOp ops[IR_OP_COUNT]; /* the counted ops (main), one loop test each */

START_TEST(test_elem_work) {
  IrOp op = ops[_i];
  Walk w;
  int got = codegen_count(op, &w), table = cost_elem_work(op), fl = ir_ops[op].flop_per_elem;
  const char *name = ir_ops[op].name;
  if (got < 0) {
    printf("%-16s calls %s: the table's estimate %d (model FLOPs %d)\n", name, w.call, table, fl);
    fflush(stdout);
    ck_assert_msg(table > 0,
                  "%s: codegen's element calls %s; passes/cost.c cost_elem_work has no "
                  "estimate of the call",
                  name, w.call);
    return;
  }
  printf("%-16s codegen %3d  table %3d  (model FLOPs %d)\n", name, got, table, fl);
  fflush(stdout); /* a failed check ends the test's process */
  if (table > 0)
    ck_assert_msg(got == table,
                  "%s: codegen/cg_loops.c emits %d instructions an element (fdiv and sqrt "
                  "8, bitcast 0), passes/cost.c cost_elem_work says %d",
                  name, got, table);
  else
    ck_assert_msg(got <= fl,
                  "%s: codegen/cg_loops.c emits %d instructions an element, more than its %d "
                  "model FLOPs; passes/cost.c cost_elem_work has no entry for it",
                  name, got, fl);
}
END_TEST

int main(void) {
  Suite *s = suite_create("cg_elem_work");
  TCase *tc = tcase_create("core");
  tcase_add_checked_fixture(tc, setup, teardown);
  int nops = 0;
  for (int op = 0; op < IR_OP_COUNT; op++)
    if (counted_op((IrOp)op)) ops[nops++] = (IrOp)op;
  tcase_add_loop_test(tc, test_elem_work, 0, nops);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int nf = srunner_ntests_failed(sr);
  srunner_free(sr);
  return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
