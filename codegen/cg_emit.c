/* Object emission and the link: the host TargetMachine (LLVMGetHostCPUName
 * and features, so the fused loops vectorise for this CPU), the new pass
 * manager's default<On> pipeline, LLVMTargetMachineEmitToFile, then the
 * system compiler driver links the object with libmmrt (whose mmrt_main.c
 * holds main) and its libraries. */
#include <errno.h>
#include <llvm-c/Analysis.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cg_internal.h"

#ifndef MMC_LINK_CC
#define MMC_LINK_CC "cc"
#endif
#ifndef MMC_RUNTIME_LIB
#define MMC_RUNTIME_LIB "libmmrt.a"
#endif
#ifndef MMC_RUNTIME_LIBS
#define MMC_RUNTIME_LIBS "-ldnnl -lpng -lgif -lz -ljson-c -lm -fopenmp"
#endif
#ifndef MMC_RUNTIME_INCLUDE
#define MMC_RUNTIME_INCLUDE "runtime"
#endif

static const char *env_or(const char *name, const char *dflt) {
  const char *v = getenv(name);
  return v && *v ? v : dflt;
}

const char *cg_link_cc(void) {
  return env_or("MMC_CC", MMC_LINK_CC);
}
const char *cg_runtime_lib(void) {
  return env_or("MMC_RUNTIME_LIB", MMC_RUNTIME_LIB);
}
const char *cg_runtime_libs(void) {
  return env_or("MMC_RUNTIME_LIBS", MMC_RUNTIME_LIBS);
}
const char *cg_runtime_include(void) {
  return env_or("MMC_RUNTIME_INCLUDE", MMC_RUNTIME_INCLUDE);
}

static LLVMTargetMachineRef host_machine(Cg *cg, int opt) {
  LLVMInitializeNativeTarget();
  LLVMInitializeNativeAsmPrinter();
  char *triple = LLVMGetDefaultTargetTriple();
  LLVMTargetRef target;
  char *err = NULL;
  if (LLVMGetTargetFromTriple(triple, &target, &err)) {
    cg_error(cg, NULL, "no LLVM target for %s: %s", triple, err ? err : "?");
    LLVMDisposeMessage(err);
    LLVMDisposeMessage(triple);
    return NULL;
  }
  char *cpu = LLVMGetHostCPUName(), *features = LLVMGetHostCPUFeatures();
  LLVMCodeGenOptLevel lvl = opt <= 0   ? LLVMCodeGenLevelNone
                            : opt == 1 ? LLVMCodeGenLevelLess
                            : opt == 2 ? LLVMCodeGenLevelDefault
                                       : LLVMCodeGenLevelAggressive;
  LLVMTargetMachineRef tm = LLVMCreateTargetMachine(target, triple, cpu, features, lvl,
                                                    LLVMRelocPIC, LLVMCodeModelDefault);
  LLVMSetTarget(cg->mod, triple);
  LLVMTargetDataRef dl = LLVMCreateTargetDataLayout(tm);
  LLVMSetModuleDataLayout(cg->mod, dl);
  LLVMDisposeTargetData(dl);
  LLVMDisposeMessage(cpu);
  LLVMDisposeMessage(features);
  LLVMDisposeMessage(triple);
  return tm;
}

/* Runs argv, returns its exit status (or -1 when it could not start). */
static int run(char *const *argv, bool verbose) {
  if (verbose) {
    for (int i = 0; argv[i]; i++) fprintf(stderr, "%s%s", i ? " " : "", argv[i]);
    fputc('\n', stderr);
  }
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    execvp(argv[0], argv);
    fprintf(stderr, "mmc: cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  int st;
  while (waitpid(pid, &st, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Any function of m takes a 5-D f32 input (a video: [B, C, T, H, W]). */
static bool takes_video(const IrModule *m) {
  for (int f = 0; f < m->funcs.len; f++) {
    const IrFunc *fn = m->funcs.items[f];
    for (int i = 0; i < fn->inputs.len; i++) {
      const IrValue *v = fn->inputs.items[i];
      if (v->shape.rank == 5 && v->dtype == IR_F32) return true;
    }
  }
  return false;
}

/* cc -o out obj libmmrt.a <libs...> */
static bool link_trainer(Cg *cg, const char *obj, const char *out, bool verbose) {
  const char *cc = cg_link_cc(), *lib = cg_runtime_lib();
  if (access(lib, R_OK) != 0) {
    cg_error(cg, NULL, "cannot read the runtime library '%s' (set MMC_RUNTIME_LIB)", lib);
    return false;
  }
  char *libs = arena_strdup(cg->a, cg_runtime_libs());
  char *argv[128];
  int n = 0;
  argv[n++] = (char *)cc;
  argv[n++] = "-o";
  argv[n++] = (char *)out;
  argv[n++] = (char *)obj;
  /* the video-file decoder (and FFmpeg's libraries) only for a model that
   * takes a video, a 5-D f32 input (runtime/data/mmrt_vfiles.h) */
  static char *const video[] = {"-Wl,-u,mmrt_feed_vfiles_open", "-Wl,-u,mmrt_feed_vfiles_rows",
                                "-Wl,-u,mmrt_vfiles_open", "-Wl,-u,mmrt_vfiles_batch",
                                "-Wl,-u,mmrt_vfiles_close"};
  if (takes_video(cg->m))
    for (size_t k = 0; k < sizeof video / sizeof video[0]; k++) argv[n++] = video[k];
  argv[n++] = (char *)lib;
  for (char *tok = strtok(libs, " "); tok && n < 126; tok = strtok(NULL, " ")) argv[n++] = tok;
  argv[n] = NULL;
  if (verbose) fprintf(stderr, "mmc: runtime %s, headers in %s\n", lib, cg_runtime_include());
  int rc = run(argv, verbose);
  if (rc != 0) {
    cg_error(cg, NULL, "linking '%s' with %s failed (exit status %d)", out, cc, rc);
    return false;
  }
  return true;
}

bool cg_emit_module(Cg *cg, const CgOptions *o) {
  char *msg = NULL;
  if (LLVMVerifyModule(cg->mod, LLVMReturnStatusAction, &msg)) {
    cg_error(cg, NULL, "invalid LLVM module (a codegen bug): %s", msg ? msg : "?");
    LLVMDisposeMessage(msg);
    return false;
  }
  LLVMDisposeMessage(msg);
  LLVMTargetMachineRef tm = host_machine(cg, o->opt_level);
  if (!tm) return false;
  bool ok = true;
  char pipeline[32];
  snprintf(pipeline, sizeof pipeline, "default<O%d>",
           o->opt_level < 0   ? 0
           : o->opt_level > 3 ? 3
                              : o->opt_level);
  LLVMPassBuilderOptionsRef po = LLVMCreatePassBuilderOptions();
  LLVMPassBuilderOptionsSetLoopVectorization(po, o->opt_level >= 2);
  LLVMPassBuilderOptionsSetSLPVectorization(po, o->opt_level >= 2);
  LLVMErrorRef e = LLVMRunPasses(cg->mod, pipeline, tm, po);
  LLVMDisposePassBuilderOptions(po);
  if (e) {
    char *m = LLVMGetErrorMessage(e);
    cg_error(cg, NULL, "LLVM passes failed: %s", m);
    LLVMDisposeErrorMessage(m);
    ok = false;
  }
  if (ok && (o->emit == CG_EMIT_LLVM || o->emit == CG_EMIT_ASM)) {
    char *text = NULL;
    LLVMMemoryBufferRef buf = NULL;
    if (o->emit == CG_EMIT_LLVM) {
      text = LLVMPrintModuleToString(cg->mod);
    } else if (LLVMTargetMachineEmitToMemoryBuffer(tm, cg->mod, LLVMAssemblyFile, &msg, &buf)) {
      ok = cg_error(cg, NULL, "emitting assembly failed: %s", msg ? msg : "?");
      LLVMDisposeMessage(msg);
    }
    const char *s = text ? text : buf ? LLVMGetBufferStart(buf) : NULL;
    size_t len = text ? strlen(text) : buf ? LLVMGetBufferSize(buf) : 0;
    if (ok && s) {
      FILE *out = o->output ? fopen(o->output, "w") : stdout;
      if (!out || fwrite(s, 1, len, out) != len)
        ok = cg_error(cg, NULL, "cannot write '%s'", o->output);
      if (out && out != stdout) fclose(out);
    }
    if (text) LLVMDisposeMessage(text);
    if (buf) LLVMDisposeMemoryBuffer(buf);
  } else if (ok) {
    const char *out = o->output ? o->output : o->emit == CG_EMIT_OBJ ? "trainer.o" : "trainer";
    char *obj = o->emit == CG_EMIT_OBJ ? arena_strdup(cg->a, out)
                                       : arena_printf(cg->a, "%s.o.tmp%d", out, (int)getpid());
    if (LLVMTargetMachineEmitToFile(tm, cg->mod, obj, LLVMObjectFile, &msg)) {
      ok = cg_error(cg, NULL, "emitting '%s' failed: %s", obj, msg ? msg : "?");
      LLVMDisposeMessage(msg);
    } else if (o->emit == CG_EMIT_EXE) {
      ok = link_trainer(cg, obj, out, o->verbose);
      unlink(obj);
    }
  }
  LLVMDisposeTargetMachine(tm);
  return ok;
}
