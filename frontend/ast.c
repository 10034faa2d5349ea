/* AST helpers shared by the parser and its readers. */
#include "frontend/ast.h"

const char *ast_op_str(AstOp op) {
  switch (op) {
    case OP_ADD: return "+";
    case OP_SUB: return "-";
    case OP_MUL: return "*";
    case OP_DIV: return "/";
    case OP_FLOORDIV: return "//";
    case OP_MOD: return "%";
    case OP_POW: return "**";
    case OP_MATMUL: return "@";
    case OP_EQ: return "==";
    case OP_NE: return "!=";
    case OP_LT: return "<";
    case OP_LE: return "<=";
    case OP_GT: return ">";
    case OP_GE: return ">=";
    case OP_AND: return "and";
    case OP_OR: return "or";
    case OP_NEG: return "-";
    case OP_NOT: return "not";
  }
  return "?";
}
