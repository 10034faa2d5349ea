/* fe_parse: runs the flex scanner and the bison parser (lang/) over one
 * loaded source file and returns its AST. Syntax errors are reported through
 * diag; the AST is returned even when partial. No flex or bison memory
 * outlives the call. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/ast.h"
#include "parser.tab.h"

#define YYSTYPE MMSTYPE
#define YYLTYPE MMLTYPE
#include "lexer.yy.h"

int mmparse(ParseState *ps);

AstFile *fe_parse(Arena *ast, Diag *d, uint32_t file_id) {
  AstFile *file = ARENA_NEW(ast, AstFile);
  file->file_id = file_id;
  const SrcFile *src = diag_file(d, file_id);
  if (!src) {
    file->path = "<none>";
    diag_error_plain(d, "internal: no source file with index %u to parse", file_id);
    return file;
  }
  file->path = arena_strdup(ast, src->path);
  if (src->size > (size_t)INT_MAX) {
    diag_error_plain(d, "%s: file too large to parse (%zu bytes)", src->path, src->size);
    return file;
  }

  /* On the heap: fatal scanner errors longjmp back here, and the state must
   * stay valid across that jump. */
  ParseState *ps = calloc(1, sizeof *ps);
  if (!ps) mm_die(__FILE__, __LINE__, "out of memory");
  ps->arena = ast;
  ps->d = d;
  ps->file_id = file_id;
  ps->path = file->path;
  ps->src = src;
  ps->file = file;
  ps->line = 1;
  ps->col = 1;
  if (mmlxlex_init_extra(ps, &ps->scanner) != 0) {
    diag_error_plain(d, "%s: cannot start the lexer", src->path);
    free(ps);
    return file;
  }
  if (setjmp(ps->fatal_jmp) == 0) {
    mmlx_scan_bytes(src->text, (int)src->size, ps->scanner);
    mmparse(ps);
  }
  mmlxlex_destroy(ps->scanner);
  free(ps);
  return file;
}
