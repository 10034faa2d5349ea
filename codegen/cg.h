/* codegen: a planned IR module into a trainer.
 *
 * One LLVM module per trainer (LLVM 19 C API): `mm_train_step` (@train:
 * forward, backward, optimizer) and `mm_eval_step` (@forward), each a
 * straight-line sequence of calls into the runtime ABI (runtime/model/mmrt_main.h)
 * with arena base + offset pointers and constant shapes; fused elementwise
 * nodes and the layout ops as LLVM loops, vectorised for the host CPU; and
 * the constant model descriptor `mm_model`. The object is emitted by the
 * host TargetMachine and linked with libmmrt by the system compiler driver.
 * Errors (an op the backend cannot lower, a failed link) go to the Diag;
 * nothing here exits. */
#ifndef MM_CODEGEN_CG_H
#define MM_CODEGEN_CG_H

#include <stdbool.h>

#include "../ir/settings.h"
#include "../ir/ir.h"

typedef enum CgEmit {
  CG_EMIT_EXE,  /* a linked trainer */
  CG_EMIT_OBJ,  /* the object file */
  CG_EMIT_LLVM, /* LLVM IR text, after optimisation */
  CG_EMIT_ASM,  /* assembly */
} CgEmit;

typedef struct CgOptions {
  CgEmit emit;
  const char
      *output;   /* file to write; NULL: "trainer" (exe), "trainer.o" (obj), stdout (llvm, asm) */
  int opt_level; /* 0..3 */
  bool verbose;  /* print the link command */
  int task;      /* MMRT_TASK_TRAIN (0), _GENERATE, _EVAL: what the executable does */
  double predicted_step_s;      /* --device: the cost model's step (0: none) */
  const char *predicted_device; /* its device's name */
} CgOptions;

/* The compiler driver, runtime library, its link flags and its header
 * directories, space-separated: every room of runtime/ (built-in paths
 * from the build, overridden by $MMC_CC, $MMC_RUNTIME_LIB,
 * $MMC_RUNTIME_LIBS, $MMC_RUNTIME_INCLUDE). The headers (mmrt_main.h) are
 * for linking an --emit obj object with a main of one's own; mmc itself
 * needs only the library. */
const char *cg_link_cc(void);
const char *cg_runtime_lib(void);
const char *cg_runtime_libs(void);
const char *cg_runtime_include(void);

/* m must have passed memplan. */
bool cg_compile(IrModule *m, const MmTrain *train, const CgOptions *o, Diag *d);

/* m and the same model compiled at smaller tile counts (--tile-buckets,
 * docs/architecture.md "Data"), each its own step functions and
 * descriptor (mm_model_bI), listed in mm_tile_buckets[mm_tile_nbuckets];
 * the buckets must have passed memplan and share m's parameters. */
bool cg_compile_buckets(IrModule *m, const MmTrain *train, IrModule *const *buckets, int nbuckets,
                        const CgOptions *o, Diag *d);

#endif
