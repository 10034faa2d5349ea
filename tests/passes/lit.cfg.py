# lit configuration for the per-pass IR text tests: each tests/passes/<pass>/*.mmir
# runs `mmc opt` (or `mmc dump-ir`) on itself from its `// RUN:` lines and
# checks the output with FileCheck against its `// CHECK:` lines. Run by ctest
# (test passes_lit) as
#   MMC=build/mmc python3 /usr/lib/llvm-19/build/utils/lit/lit.py -sv tests/passes
import os

import lit.formats

config.name = "mmc-passes"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mmir"]
config.excludes = ["Inputs"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(
    os.environ.get("MMC_BINARY_DIR", os.path.dirname(os.environ.get("MMC", "."))), "lit-passes")

mmc = os.environ.get("MMC")
if not mmc or not os.access(mmc, os.X_OK):
    lit_config.fatal("set MMC to the mmc executable (ctest does)")
config.substitutions.append(("%mmc", mmc))
# the sanitizer build's settings (tools/test.sh runs this under ASan too)
for var in ("ASAN_OPTIONS", "LSAN_OPTIONS", "UBSAN_OPTIONS"):
    if var in os.environ:
        config.environment[var] = os.environ[var]
# FileCheck and not from Debian's llvm-19-tools
llvm_bin = "/usr/lib/llvm-19/bin"
config.environment["PATH"] = os.pathsep.join([llvm_bin, config.environment.get("PATH", "")])
