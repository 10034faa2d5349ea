# Writes OUT (mmc_version.h) with VERSION and, when SRC is a git checkout
# and git runs, `git describe --always --dirty` of it; rewritten only when
# it changes, so a build after a commit picks up the new description.
set(desc "")
find_package(Git QUIET)
if(GIT_FOUND)
  execute_process(COMMAND ${GIT_EXECUTABLE} -C ${SRC} describe --always --dirty
                  OUTPUT_VARIABLE desc OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET
                  RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    set(desc "")
  endif()
endif()
file(WRITE ${OUT}.tmp "#define MMC_VERSION \"${VERSION}\"\n#define MMC_GIT_DESCRIBE \"${desc}\"\n")
file(COPY_FILE ${OUT}.tmp ${OUT} ONLY_IF_DIFFERENT)
file(REMOVE ${OUT}.tmp)
