/* The calls of runtime functions: their LLVM types come from the one list
 * of entry points, runtime/core/mmrt_abi.def, that the runtime headers also make
 * their C prototypes from. The type macros of that list stay local to this
 * file. */
#include <math.h>
#include <string.h>

#include "mmrt_main.h"
#include "cg_internal.h"

/* the libm entries of mmrt_abi.def, redeclared: a mismatch with <math.h>
 * does not compile */
#define MMRT_ABI_SECTION_LIBM
#include "mmrt_abi.h"

/* ---- the runtime functions the step functions call ----
 * Their signatures come from runtime/core/mmrt_abi.def, as "ret" and "args"
 * with v void, i i32 (int and enums), l i64 (int64_t, size_t, uint64_t),
 * f float, d double, p pointer: the list the runtime headers make their
 * prototypes from. */
_Static_assert(sizeof(size_t) == 8 && sizeof(MmrtDtype) == 4,
               "the ABI letters assume LP64 and int-sized enums");
#define i32(n)                        'i'
#define i64(n)                        'l'
#define size(n)                       'l'
#define u64(n)                        'l'
#define f32(n)                        'f'
#define f64(n)                        'd'
#define en(T, n)                      'i'
#define ptr(T, n)                     'p'
#define CG_RET_void                   'v'
#define CG_RET_int                    'i'
#define CG_RET_float                  'f'
#define CG_RET_double                 'd'
#define CG_RET_uint64_t               'l'
#define CG_ARGS(...)                  __VA_ARGS__
#define MMRT_FN(sec, ret, name, args) {#name, CG_RET_##ret, (const char[]){CG_ARGS args, 0}},
static const struct {
  const char *name;
  char ret;
  const char *args;
} rt_fns[] = {
#include "mmrt_abi.def"
};

static LLVMTypeRef sig_type(Cg *cg, char c) {
  switch (c) {
    case 'v': return cg->t_void;
    case 'i': return cg->t_i32;
    case 'l': return cg->t_i64;
    case 'f': return cg->t_f32;
    case 'd': return cg->t_f64;
    case 'p': return cg->t_ptr;
  }
  MM_UNREACHABLE();
}

LLVMValueRef cg_call(Cg *cg, const char *name, LLVMValueRef *args, int nargs) {
  size_t k = 0;
  while (k < sizeof rt_fns / sizeof rt_fns[0] && strcmp(rt_fns[k].name, name) != 0) k++;
  if (k == sizeof rt_fns / sizeof rt_fns[0])
    mm_die(__FILE__, __LINE__, "codegen: %s is not in runtime/core/mmrt_abi.def", name);
  const char *sig = rt_fns[k].args;
  MM_ASSERT((int)strlen(sig) == nargs && nargs <= 32);
  LLVMTypeRef params[32];
  for (int i = 0; i < nargs; i++) params[i] = sig_type(cg, sig[i]);
  LLVMTypeRef ty = LLVMFunctionType(sig_type(cg, rt_fns[k].ret), params, (unsigned)nargs, false);
  LLVMValueRef fn = LLVMGetNamedFunction(cg->mod, name);
  if (!fn) {
    fn = LLVMAddFunction(cg->mod, name, ty);
    LLVMSetLinkage(fn, LLVMExternalLinkage);
  }
  return LLVMBuildCall2(cg->b, ty, fn, args, (unsigned)nargs, "");
}
