/* The IR text form (see the top of ir.h) and a Graphviz view.
 *
 * Node results are renumbered 0, 1, ... in print order, so a printed module
 * never shows the gaps that rewrites leave; function inputs print with their
 * names and parameters as @name. Every float prints in the shortest form
 * that strtod reads back to the same double, so print -> parse -> print is
 * byte-identical. One rank's view (ir_print_module_rank, `dump-ir --rank`)
 * prints local shapes (shape attributes too) and each collective's group; it
 * is for reading, not parsing. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir_settings.h"

typedef struct Printer {
  FILE *out;
  const IrModule *m;
  bool use_map; /* number values through `num` (else their stored ids) */
  IrMap num;    /* IrValue* -> i: print number; p: kind (see below) */
  int rank;     /* >= 0: one rank's program (local shapes) */
  int coord[IR_NAXES];
} Printer;

enum { VK_PARAM = 1, VK_INPUT, VK_RESULT };

/* ---- lexical pieces shared with the parser's conventions ---- */

static bool bare_char(int c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == '$' || c == '-';
}

static void print_string(FILE *out, const char *s) {
  fputc('"', out);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\')
      fprintf(out, "\\%c", *p);
    else if (*p < 0x20 || *p == 0x7f)
      fprintf(out, "\\%02X", *p);
    else
      fputc(*p, out);
  }
  fputc('"', out);
}

/* @name / %name: bare when it can be, else quoted. A %name made only of
 * digits is quoted so that it cannot be read as a numbered result. */
static void print_name(FILE *out, char sigil, const char *s) {
  bool bare = *s != 0, digits = true;
  for (const char *p = s; *p; p++) {
    if (!bare_char((unsigned char)*p)) bare = false;
    if (*p < '0' || *p > '9') digits = false;
  }
  fputc(sigil, out);
  if (bare && !(sigil == '%' && digits))
    fputs(s, out);
  else
    print_string(out, s);
}

/* Shortest %.Ng that strtod reads back exactly; an integral value whose
 * plain digits are no longer than that prints plain (10000, not 1e+04). */
static void fmt_float(char *buf, size_t n, double x) {
  if (isnan(x)) {
    snprintf(buf, n, "nan");
    return;
  }
  for (int p = 1; p <= 17; p++) {
    snprintf(buf, n, "%.*g", p, x);
    double y = strtod(buf, NULL);
    if (y == x && signbit(y) == signbit(x)) break;
  }
  if (x == trunc(x) && fabs(x) < 1e17 && strchr(buf, 'e')) {
    char plain[40];
    snprintf(plain, sizeof plain, "%.0f", x);
    if (strlen(plain) <= strlen(buf)) snprintf(buf, n, "%s", plain);
  }
}

static void print_float(FILE *out, double x) {
  char buf[40];
  fmt_float(buf, sizeof buf, x);
  fputs(buf, out);
}

/* loc("file":line:col) */
static void print_loc_body(const Printer *p, SrcLoc loc) {
  fputs("loc(", p->out);
  print_string(p->out, p->m->diag ? diag_path(p->m->diag, loc) : "<unknown>");
  fprintf(p->out, ":%u:%u)", loc.line, loc.col);
}

static void print_loc(const Printer *p, SrcLoc loc) {
  if (!loc.file) return;
  fputc(' ', p->out);
  print_loc_body(p, loc);
}

static void print_layer(const Printer *p, int group, int layer) {
  if (group < 0) return;
  const IrGroup *g = group < p->m->groups.len ? p->m->groups.items[group] : NULL;
  fputs(" layer(", p->out);
  print_string(p->out, g ? g->name : "?");
  fprintf(p->out, ", %d)", layer);
}

static void print_type(const Printer *p, const IrValue *v) {
  FILE *out = p->out;
  IrShape s = v->shape;
  if (p->rank >= 0) ir_local_shape(p->m, v->pl, &v->shape, &s);
  fprintf(out, "%s[", ir_dtype_name(v->dtype));
  for (int i = 0; i < s.rank && i < IR_MAX_RANK; i++)
    fprintf(out, "%s%lld", i ? ", " : "", (long long)s.d[i]);
  fputs("]{", out);
  for (int a = 0; a < IR_NAXES; a++) {
    fprintf(out, "%s%s:", a ? ", " : "", ir_axis_name((IrAxis)a));
    switch (v->pl[a].kind) {
      case IR_PL_B: fputc('B', out); break;
      case IR_PL_S: fprintf(out, "S(%d)", v->pl[a].dim); break;
      case IR_PL_P: fputc('P', out); break;
      default: fputc('?', out); break;
    }
  }
  fputc('}', out);
}

/* mem(act, 4096): where the memory plan put the value */
static void print_mem(const Printer *p, const IrValue *v) {
  if (v->mem_planned)
    fprintf(p->out, " mem(%s, %lld)", ir_role_name(v->mem_arena), (long long)v->mem_offset);
}

static bool is_param(const IrModule *m, const IrValue *v) {
  for (int i = 0; i < m->params.len; i++)
    if (m->params.items[i] == v) return true;
  return false;
}

static void print_ref(const Printer *p, const IrValue *v) {
  if (!v) {
    fputs("%<null>", p->out);
    return;
  }
  if (p->use_map) {
    const IrMapSlot *s = ir_map_get(&p->num, v);
    if (s && s->p == (void *)VK_RESULT) {
      fprintf(p->out, "%%%lld", (long long)s->i);
      return;
    }
    if (s) {
      print_name(p->out, s->p == (void *)VK_PARAM ? '@' : '%', v->name ? v->name : "?");
      return;
    }
  }
  /* not numbered: a value of another function (broken module), or a single
   * node printed on its own */
  if (v->def)
    fprintf(p->out, "%%%d", v->id);
  else
    print_name(p->out, is_param(p->m, v) ? '@' : '%', v->name ? v->name : "?");
}

static void print_attr_value(FILE *out, IrAttrKind kind, const IrAttrVal *v) {
  switch (kind) {
    case IR_AK_INT: fprintf(out, "%lld", (long long)v->i); break;
    case IR_AK_INTS:
      fputc('[', out);
      for (int i = 0; i < v->nints; i++)
        fprintf(out, "%s%lld", i ? ", " : "", (long long)v->ints[i]);
      fputc(']', out);
      break;
    case IR_AK_FLOAT: print_float(out, v->f); break;
    case IR_AK_BOOL: fputs(v->i ? "true" : "false", out); break;
    case IR_AK_STR: print_string(out, v->s ? v->s : ""); break;
    case IR_AK_DTYPE: fputs(ir_dtype_name((IrDType)v->i), out); break;
    case IR_AK_MESH: fputs(ir_axis_name((IrAxis)v->i), out); break;
  }
}

/* role(...) when it is not the default, and grad(@param) for a gradient */
static void print_role(const Printer *p, const IrValue *v, IrRole dflt) {
  if (v->role != dflt) fprintf(p->out, " role(%s)", ir_role_name(v->role));
  if (v->grad_of) {
    fputs(" grad(", p->out);
    print_name(p->out, '@', v->grad_of->name ? v->grad_of->name : "?");
    fputc(')', p->out);
  }
}

/* "%a, %b = op(...) {attrs} : types ..."; an op without results (nout 0,
 * a side effect) prints as "op(...) {attrs} ..." with no types. */
static void print_node(const Printer *p, const IrNode *n, const char *indent) {
  FILE *out = p->out;
  fputs(indent, out);
  for (int j = 0; j < n->nout; j++) {
    if (j) fputs(", ", out);
    print_ref(p, n->out[j]);
  }
  if (n->nout) fputs(" = ", out);
  fprintf(out, "%s(", (unsigned)n->op < IR_OP_COUNT ? ir_ops[n->op].name : "?");
  for (int i = 0; i < n->nin; i++) {
    if (i) fputs(", ", out);
    print_ref(p, n->in[i]);
  }
  fputc(')', out);
  if (n->attrs.set) {
    fputs(" {", out);
    bool first = true;
    for (int k = 0; k < IR_ATTR_COUNT; k++) {
      if (!(n->attrs.set >> k & 1)) continue;
      fprintf(out, "%s%s = ", first ? "" : ", ", ir_attrs[k].name);
      IrAttrVal v = n->attrs.v[k];
      int64_t local[IR_MAX_RANK];
      if (p->rank >= 0 && k == IR_ATTR_SHAPE && n->nout >= 1 && v.nints == n->out[0]->shape.rank) {
        /* a shape attribute is its result's shape: print the local one */
        IrShape ls;
        ir_local_shape(p->m, n->out[0]->pl, &n->out[0]->shape, &ls);
        for (int i = 0; i < v.nints; i++) local[i] = ls.d[i];
        v.ints = local;
      }
      print_attr_value(out, ir_attrs[k].kind, &v);
      first = false;
    }
    fputc('}', out);
  }
  for (int j = 0; j < n->nout; j++) {
    fputs(j ? ", " : " : ", out);
    print_type(p, n->out[j]);
    print_role(p, n->out[j], IR_ROLE_ACT);
    print_mem(p, n->out[j]);
  }
  if (n->ws_bytes > 0)
    fprintf(out, " ws(%lld, %lld)", (long long)n->ws_offset, (long long)n->ws_bytes);
  if (n->pp_part == IR_PP_U)
    fputs(" pp(U)", out);
  else if (n->pp_part != IR_PP_NONE)
    fprintf(out, " pp(%d, %s)", n->pp_stage, ir_pp_part_name(n->pp_part));
  if (p->rank >= 0 && ir_ops[n->op].shard == IR_SHR_COLLECTIVE &&
      ir_attrs_has(&n->attrs, IR_ATTR_MESH)) {
    /* the ranks of this rank's group on the collective's axis */
    int a = (int)n->attrs.v[IR_ATTR_MESH].i, c[IR_NAXES];
    memcpy(c, p->coord, sizeof c);
    fputs(" group(", out);
    for (int i = 0; a >= 0 && a < IR_NAXES && i < p->m->mesh[a]; i++) {
      c[a] = i;
      fprintf(out, "%s%d", i ? ", " : "", ir_rank_of(p->m, c));
    }
    fputc(')', out);
  }
  print_layer(p, n->group, n->layer);
  if (n->scope) {
    fputs(" scope(", out);
    print_string(out, n->scope);
    fputc(')', out);
  }
  print_loc(p, n->loc);
  fputc('\n', out);
}

void ir_print_node(FILE *out, const IrModule *m, const IrNode *n) {
  Printer p = {.out = out, .m = m, .rank = -1};
  print_node(&p, n, "");
}

static void print_param(const Printer *p, const IrValue *v) {
  FILE *out = p->out;
  fputs("param ", out);
  print_name(out, '@', v->name ? v->name : "?");
  fputs(" : ", out);
  print_type(p, v);
  print_role(p, v, IR_ROLE_PARAM);
  print_mem(p, v);
  const IrInit *in = &v->init;
  switch (in->kind) {
    case IR_INIT_NONE: break;
    case IR_INIT_ZEROS:
    case IR_INIT_ONES: fprintf(out, " init(%s)", ir_init_name(in->kind)); break;
    case IR_INIT_UNIFORM:
      fprintf(out, " init(%s, ", ir_init_name(in->kind));
      print_float(out, in->a);
      fputs(", ", out);
      print_float(out, in->b);
      fputc(')', out);
      break;
    default:
      fprintf(out, " init(%s, ", ir_init_name(in->kind));
      print_float(out, in->a);
      fputc(')', out);
      break;
  }
  if (v->frozen) fputs(" frozen", out);
  if (v->rows) fprintf(out, " rows(%lld)", (long long)v->rows);
  print_layer(p, v->group, v->layer);
  print_loc(p, v->loc);
  fputc('\n', out);
}

static void print_func(Printer *p, const IrFunc *f, Arena *scratch) {
  FILE *out = p->out;
  ir_map_init(&p->num, scratch, false);
  for (int i = 0; i < p->m->params.len; i++)
    ir_map_put(&p->num, p->m->params.items[i])->p = (void *)VK_PARAM;
  for (int i = 0; i < f->inputs.len; i++)
    ir_map_put(&p->num, f->inputs.items[i])->p = (void *)VK_INPUT;
  int id = 0;
  for (int i = 0; i < f->nodes.len; i++) {
    const IrNode *n = f->nodes.items[i];
    for (int j = 0; j < n->nout; j++) {
      IrMapSlot *s = ir_map_put(&p->num, n->out[j]);
      s->i = id++;
      s->p = (void *)VK_RESULT;
    }
  }
  p->use_map = true;

  fputs("func ", out);
  print_name(out, '@', f->name);
  fputc('(', out);
  for (int i = 0; i < f->inputs.len; i++) {
    const IrValue *v = f->inputs.items[i];
    if (i) fputs(", ", out);
    print_name(out, '%', v->name ? v->name : "?");
    fputs(" : ", out);
    print_type(p, v);
    print_role(p, v, IR_ROLE_INPUT);
    print_mem(p, v);
    print_loc(p, v->loc);
  }
  fputs(") {\n", out);
  for (int i = 0; i < f->nodes.len; i++) print_node(p, f->nodes.items[i], "  ");
  fputs("  return", out);
  for (int i = 0; i < f->results.len; i++) {
    fputs(i ? ", " : " ", out);
    print_ref(p, f->results.items[i]);
  }
  fputs("\n}\n", out);
  p->use_map = false;
}

/* ---- settings: plan(...), train(...), passes(...) (ir_settings.h) ---- */

static void print_strs(FILE *out, const char *const *v, int n) {
  fputc('[', out);
  for (int i = 0; i < n; i++) {
    if (i) fputs(", ", out);
    print_string(out, v[i] ? v[i] : "");
  }
  fputc(']', out);
}

/* The fields that differ from their defaults, ", "-separated. */
static void print_fields(const Printer *p, const IrSetting *fields) {
  FILE *out = p->out;
  bool first = true;
  for (const IrSetting *f = fields; f->name; f++) {
    if (ir_setting_is_default(p->m, f)) continue;
    if (!first) fputs(", ", out);
    first = false;
    const char *at = (const char *)p->m + f->off;
    if (f->kind == IR_SK_LOC) {
      print_loc_body(p, *(const SrcLoc *)at);
      continue;
    }
    fprintf(out, "%s = ", f->name);
    int count = f->count_off ? *(const int *)((const char *)p->m + f->count_off) : 0;
    switch (f->kind) {
      case IR_SK_INT: fprintf(out, "%d", *(const int *)at); break;
      case IR_SK_BOOL: fputs(*(const bool *)at ? "true" : "false", out); break;
      case IR_SK_FLOAT: print_float(out, *(const double *)at); break;
      case IR_SK_ENUM: { /* "1f1b" is not a bare word */
        const char *name = f->names[*(const int *)at];
        if ((name[0] >= 'a' && name[0] <= 'z'))
          fputs(name, out);
        else
          print_string(out, name);
        break;
      }
      case IR_SK_STRS: print_strs(out, *(const char *const *const *)at, count); break;
      case IR_SK_STAGES: {
        const MmStage *st = *(const MmStage *const *)at;
        fputc('[', out);
        for (int i = 0; i < count; i++) {
          if (i) fputs(", ", out);
          print_strs(out, st[i].units, st[i].nunits);
        }
        fputc(']', out);
        break;
      }
      case IR_SK_SUB:
        fprintf(out, "%s(", f->name);
        print_fields(p, f->sub);
        fputc(')', out);
        break;
      case IR_SK_LOC: break;
      case IR_SK_STR: print_string(out, *(const char *const *)at); break;
    }
  }
}

static void print_settings(const Printer *p) {
  FILE *out = p->out;
  for (int i = 0; i < ir_set_nlines; i++) {
    bool any = false;
    for (const IrSetting *f = ir_set_lines[i].fields; f->name && !any; f++)
      any = !ir_setting_is_default(p->m, f);
    if (!any) continue;
    fprintf(out, "%s(", ir_set_lines[i].name);
    print_fields(p, ir_set_lines[i].fields);
    fputs(")\n", out);
  }
  if (p->m->passes_run.len) {
    fputs("passes(", out);
    for (int i = 0; i < p->m->passes_run.len; i++)
      fprintf(out, "%s%s", i ? ", " : "", (const char *)p->m->passes_run.items[i]);
    fputs(")\n", out);
  }
}

static void print_module(Printer *p) {
  Arena scratch;
  arena_init(&scratch);
  FILE *out = p->out;
  const IrModule *m = p->m;
  fputs("module ", out);
  print_name(out, '@', m->name ? m->name : "module");
  fputs(" mesh(", out);
  for (int a = 0; a < IR_NAXES; a++)
    fprintf(out, "%s%s = %d", a ? ", " : "", ir_axis_name((IrAxis)a), m->mesh[a]);
  fputs(")", out);
  if (p->rank >= 0) {
    fprintf(out, " rank %d of %d (", p->rank, ir_world_size(m));
    for (int a = 0; a < IR_NAXES; a++)
      fprintf(out, "%s%s = %d", a ? ", " : "", ir_axis_name((IrAxis)a), p->coord[a]);
    fputs("): local shapes", out);
  }
  fputc('\n', out);
  print_settings(p);
  for (int i = 0; i < m->groups.len; i++) {
    const IrGroup *g = m->groups.items[i];
    fputs("group ", out);
    print_string(out, g->name);
    fprintf(out, " layers %d\n", g->nlayers);
  }
  for (int i = 0; i < m->params.len; i++) print_param(p, m->params.items[i]);
  for (int i = 0; i < m->funcs.len; i++) print_func(p, m->funcs.items[i], &scratch);
  arena_free(&scratch);
}

void ir_print_module(FILE *out, const IrModule *m) {
  Printer p = {.out = out, .m = m, .rank = -1};
  print_module(&p);
}

void ir_print_module_rank(FILE *out, const IrModule *m, int rank) {
  Printer p = {.out = out, .m = m, .rank = rank};
  ir_rank_coords(m, rank, p.coord);
  print_module(&p);
}

/* ---- Graphviz ---- */

static void dot_escape(FILE *out, const char *s) {
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') fputc('\\', out);
    fputc(*s == '\n' ? ' ' : *s, out);
  }
}

static void dot_type(FILE *out, const IrValue *v) {
  char buf[200];
  fprintf(out, "%s%s", ir_dtype_name(v->dtype), ir_shape_str(buf, sizeof buf, &v->shape));
}

/* Length of the first `depth` dot-separated components of s (or of all of
 * it when it has fewer); sets *full when s has exactly that many. */
static size_t scope_prefix(const char *s, int depth, bool *full) {
  size_t i = 0;
  for (int d = 0; s[i]; i++)
    if (s[i] == '.' && ++d == depth) {
      *full = false;
      return i;
    }
  *full = true;
  return i;
}

static bool prefix_eq(const char *a, size_t la, const char *b, size_t lb) {
  return la == lb && !memcmp(a, b, la);
}

static void dot_node(FILE *out, int fi, int ni, const IrNode *n, const char *indent) {
  fprintf(out, "%sf%d_n%d [label=\"%s\\n", indent, fi, ni,
          (unsigned)n->op < IR_OP_COUNT ? ir_ops[n->op].name : "?");
  for (int j = 0; j < n->nout; j++) {
    if (j) fputs(", ", out);
    dot_type(out, n->out[j]);
  }
  fputs("\"];\n", out);
}

void ir_print_dot(FILE *out, const IrModule *m) {
  Arena scratch;
  arena_init(&scratch);
  IrMap where; /* IrValue* -> its dot node name */
  ir_map_init(&where, &scratch, false);
  int cluster = 0;

  fputs("digraph \"", out);
  dot_escape(out, m->name ? m->name : "module");
  fputs("\" {\n  rankdir=TB;\n  node [shape=ellipse, fontname=\"monospace\", fontsize=10];\n", out);
  for (int i = 0; i < m->params.len; i++) {
    const IrValue *v = m->params.items[i];
    fprintf(out, "  p%d [shape=box, label=\"@", i);
    dot_escape(out, v->name ? v->name : "?");
    fputs("\\n", out);
    dot_type(out, v);
    fputs("\"];\n", out);
    ir_map_put(&where, v)->p = arena_printf(&scratch, "p%d", i);
  }
  for (int fi = 0; fi < m->funcs.len; fi++) {
    const IrFunc *f = m->funcs.items[fi];
    fprintf(out, "  subgraph cluster_%d {\n    label=\"func @", cluster++);
    dot_escape(out, f->name);
    fputs("\";\n", out);
    for (int i = 0; i < f->inputs.len; i++) {
      const IrValue *v = f->inputs.items[i];
      fprintf(out, "    f%d_i%d [shape=invhouse, label=\"%%", fi, i);
      dot_escape(out, v->name ? v->name : "?");
      fputs("\\n", out);
      dot_type(out, v);
      fputs("\"];\n", out);
      ir_map_put(&where, v)->p = arena_printf(&scratch, "f%d_i%d", fi, i);
    }
    int nn = f->nodes.len;
    bool *done = ARENA_ARRAY(&scratch, bool, nn ? nn : 1);
    for (int i = 0; i < nn; i++) {
      const IrNode *n = f->nodes.items[i];
      char *name = arena_printf(&scratch, "f%d_n%d", fi, i);
      for (int j = 0; j < n->nout; j++) ir_map_put(&where, n->out[j])->p = name;
      if (!n->scope) {
        dot_node(out, fi, i, n, "    ");
        done[i] = true;
      }
    }
    /* one cluster per depth-1 scope prefix ("h"), holding one per depth-2
     * prefix ("h.0") */
    for (int i = 0; i < nn; i++) {
      if (done[i]) continue;
      const char *s1 = ((const IrNode *)f->nodes.items[i])->scope;
      bool full;
      size_t l1 = scope_prefix(s1, 1, &full);
      fprintf(out, "    subgraph cluster_%d {\n      label=\"", cluster++);
      dot_escape(out, arena_strndup(&scratch, s1, l1));
      fputs("\";\n", out);
      for (int j = i; j < nn; j++) {
        const IrNode *a = f->nodes.items[j];
        if (done[j] || !prefix_eq(a->scope, scope_prefix(a->scope, 1, &full), s1, l1)) continue;
        if (full) { /* the scope is the depth-1 prefix itself */
          dot_node(out, fi, j, a, "      ");
          done[j] = true;
          continue;
        }
        size_t l2 = scope_prefix(a->scope, 2, &full);
        fprintf(out, "      subgraph cluster_%d {\n        label=\"", cluster++);
        dot_escape(out, arena_strndup(&scratch, a->scope, l2));
        fputs("\";\n", out);
        for (int k = j; k < nn; k++) {
          const IrNode *b = f->nodes.items[k];
          if (done[k] || !prefix_eq(b->scope, scope_prefix(b->scope, 2, &full), a->scope, l2))
            continue;
          dot_node(out, fi, k, b, "        ");
          done[k] = true;
        }
        fputs("      }\n", out);
      }
      fputs("    }\n", out);
    }
    fprintf(out, "    f%d_ret [shape=plaintext, label=\"return\"];\n  }\n", fi);
    for (int i = 0; i < nn; i++) {
      const IrNode *n = f->nodes.items[i];
      for (int k = 0; k < n->nin; k++) {
        const IrMapSlot *s = n->in[k] ? ir_map_get(&where, n->in[k]) : NULL;
        if (s) fprintf(out, "  %s -> f%d_n%d;\n", (const char *)s->p, fi, i);
      }
    }
    for (int i = 0; i < f->results.len; i++) {
      const IrMapSlot *s = ir_map_get(&where, f->results.items[i]);
      if (s) fprintf(out, "  %s -> f%d_ret;\n", (const char *)s->p, fi);
    }
  }
  fputs("}\n", out);
  arena_free(&scratch);
}
