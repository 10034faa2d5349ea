/* Loading: the root file and its imports (search path, cycles, missing
 * files), the declaration table, and a static name check of every module
 * body, so that a misspelt name is reported even in a module no model uses. */
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fe_internal.h"

#ifndef MMC_STDLIB_DIR
#define MMC_STDLIB_DIR "stdlib_models"
#endif

static AstFile *load_file(FeProgram *p, const char *path, SrcLoc at);

static char *dir_of(FeProgram *p, const char *path) {
  char *tmp = arena_strdup(&p->ast, path);
  return arena_strdup(&p->ast, dirname(tmp));
}

static char *real_or_same(FeProgram *p, const char *path) {
  char *r = realpath(path, NULL);
  if (!r) return arena_strdup(&p->ast, path);
  char *s = arena_strdup(&p->ast, r);
  free(r);
  return s;
}

static const char *search_import(FeProgram *p, AstFile *from, const char *name) {
  if (name[0] == '/') return access(name, R_OK) == 0 ? name : NULL;
  const char *dirs[64];
  int n = 0;
  dirs[n++] = dir_of(p, from->path);
  for (int i = 0; i < p->opts.nincdirs && n < 62; i++) dirs[n++] = p->opts.incdirs[i];
  dirs[n++] = p->opts.stdlib_dir ? p->opts.stdlib_dir : MMC_STDLIB_DIR;
  for (int i = 0; i < n; i++) {
    const char *cand = arena_printf(&p->ast, "%s/%s", dirs[i], name);
    if (access(cand, R_OK) == 0) return cand;
  }
  return NULL;
}

static void load_imports(FeProgram *p, AstFile *f) {
  for (int i = 0; i < f->decls.len; i++) {
    AstDecl *dcl = f->decls.items[i];
    if (dcl->kind != DECL_IMPORT) continue;
    const char *found = search_import(p, f, dcl->name);
    if (!found) {
      diag_error(p->d, dcl->name_loc, "cannot find imported file '%s'", dcl->name);
      diag_note(p->d, dcl->name_loc, "searched the importing file's folder, -I folders and %s",
                p->opts.stdlib_dir ? p->opts.stdlib_dir : MMC_STDLIB_DIR);
      continue;
    }
    dcl->imported = load_file(p, found, dcl->name_loc);
  }
}

/* Parses a loaded file and, with it on the loading stack, its imports. */
static AstFile *parse_loaded(FeProgram *p, uint32_t id, const char *path, const char *real,
                             SrcLoc at) {
  AstFile *f = fe_parse(&p->ast, p->d, id);
  f->path = path;
  f->real_path = real;
  f->file_id = id;
  ptrvec_push(&p->ast, &p->files, f);
  ptrvec_push(&p->ast, &p->loading, f);
  SrcLoc *atp = ARENA_NEW(&p->ast, SrcLoc);
  *atp = at;
  ptrvec_push(&p->ast, &p->loading_at, atp);
  load_imports(p, f);
  p->loading.len--;
  p->loading_at.len--;
  return f;
}

static AstFile *load_file(FeProgram *p, const char *path, SrcLoc at) {
  const char *real = real_or_same(p, path);
  for (int i = 0; i < p->loading.len; i++) {
    AstFile *f = p->loading.items[i];
    if (strcmp(f->real_path, real) == 0) {
      /* build the chain text */
      char *chain = arena_strdup(&p->ast, "");
      for (int j = i; j < p->loading.len; j++) {
        const char *base = strrchr(((AstFile *)p->loading.items[j])->path, '/');
        chain = arena_printf(&p->ast, "%s%s -> ", chain,
                             base ? base + 1 : ((AstFile *)p->loading.items[j])->path);
      }
      const char *base = strrchr(real, '/');
      /* report at the import that starts the cycle, in the first file of it */
      SrcLoc where = at;
      if (i + 1 < p->loading.len) where = *(SrcLoc *)p->loading_at.items[i + 1];
      diag_error(p->d, where, "import cycle: %s%s", chain, base ? base + 1 : real);
      return NULL;
    }
  }
  for (int i = 0; i < p->files.len; i++) {
    AstFile *f = p->files.items[i];
    if (strcmp(f->real_path, real) == 0) return f;
  }
  const char *err = NULL;
  uint32_t id = diag_load_file(p->d, path, &err);
  if (!id) {
    if (at.file)
      diag_error(p->d, at, "cannot read '%s': %s", path, err);
    else
      diag_error_plain(p->d, "cannot read '%s': %s", path, err);
    return NULL;
  }
  return parse_loaded(p, id, arena_strdup(&p->ast, path), real, at);
}

/* Finds a module/model by name: the file itself, then its imports (depth
 * first, in import order). */
/* The module/model of that name declared in f itself (the first), or NULL. */
AstDecl *fe_file_decl(FeProgram *p, AstFile *f, const char *name) {
  if (!f->decl_map_built) {
    for (int i = 0; i < f->decls.len; i++) {
      AstDecl *dcl = f->decls.items[i];
      if (dcl->kind == DECL_IMPORT && dcl->imported)
        ptrvec_push(&p->ast, &f->imported, dcl->imported);
      else if (dcl->kind != DECL_IMPORT && !names_get(&f->decl_map, dcl->name))
        names_put(&p->ast, &f->decl_map, dcl->name, dcl);
    }
    f->decl_map_built = true;
  }
  return names_get(&f->decl_map, name);
}

static AstDecl *find_in(FeProgram *p, AstFile *f, const char *name, PtrVec *seen) {
  for (int i = 0; i < seen->len; i++)
    if (seen->items[i] == f) return NULL;
  ptrvec_push(&p->ast, seen, f);
  AstDecl *own = fe_file_decl(p, f, name);
  if (own) return own;
  for (int i = 0; i < f->imported.len; i++) {
    AstDecl *r = find_in(p, f->imported.items[i], name, seen);
    if (r) return r;
  }
  return NULL;
}

AstDecl *fe_find_decl(FeProgram *p, AstFile *from, const char *name) {
  PtrVec seen = {0};
  return find_in(p, from, name, &seen);
}

/* ---- static name check ---- */

typedef struct Scope {
  const char **names;
  int n, cap;
  NameMap map; /* the names, hashed */
  struct Scope *parent;
} Scope;

static void scope_add(FeProgram *p, Scope *s, const char *name) {
  if (names_get(&s->map, name)) return;
  if (s->n == s->cap) {
    int nc = s->cap ? s->cap * 2 : 16;
    s->names = arena_realloc(&p->ast, s->names, sizeof(char *) * (size_t)s->cap,
                             sizeof(char *) * (size_t)nc);
    s->cap = nc;
  }
  s->names[s->n++] = name;
  names_put(&p->ast, &s->map, name, (void *)name);
}

static bool scope_has(const Scope *s, const char *name) {
  for (; s; s = s->parent)
    if (names_get(&s->map, name)) return true;
  return false;
}

static bool is_number_builtin(const char *n) {
  static const char *const k[] = {"min", "max", "abs", "int", "float", "len", "sqrt", NULL};
  for (int i = 0; k[i]; i++)
    if (strcmp(k[i], n) == 0) return true;
  return false;
}

static void check_expr(FeProgram *p, AstExpr *x, const Scope *s, bool tensors);

static void check_list(FeProgram *p, PtrVec *v, const Scope *s, bool tensors) {
  for (int i = 0; i < v->len; i++) check_expr(p, v->items[i], s, tensors);
}

static void check_expr(FeProgram *p, AstExpr *x, const Scope *s, bool tensors) {
  if (!x) return;
  switch (x->kind) {
    case AST_NAME:
      if (!scope_has(s, x->name)) {
        if (fe_is_builtin(x->name) || is_number_builtin(x->name))
          diag_error(p->d, x->loc, "'%s' is a function; call it with arguments", x->name);
        else
          diag_error(p->d, x->loc, "unknown name '%s'", x->name);
      }
      break;
    case AST_CALL:
      if (x->lhs->kind == AST_NAME) {
        const char *n = x->lhs->name;
        if (!scope_has(s, n) && !(tensors && fe_is_builtin(n)) && !is_number_builtin(n)) {
          if (!tensors && fe_is_builtin(n))
            diag_error(p->d, x->lhs->loc, "tensor function '%s' used outside a forward", n);
          else
            diag_error(p->d, x->lhs->loc, "unknown function '%s'", n);
        }
      } else {
        check_expr(p, x->lhs, s, tensors);
      }
      for (int i = 0; i < x->args.len; i++)
        check_expr(p, ((AstArg *)x->args.items[i])->value, s, tensors);
      break;
    case AST_FIELD: check_expr(p, x->lhs, s, tensors); break;
    case AST_UNARY: check_expr(p, x->lhs, s, tensors); break;
    case AST_BINARY:
      check_expr(p, x->lhs, s, tensors);
      check_expr(p, x->rhs, s, tensors);
      break;
    case AST_COND:
      check_expr(p, x->cond, s, tensors);
      check_expr(p, x->lhs, s, tensors);
      check_expr(p, x->rhs, s, tensors);
      break;
    case AST_LIST: check_list(p, &x->items, s, tensors); break;
    case AST_INDEX:
      check_expr(p, x->lhs, s, tensors);
      check_list(p, &x->items, s, tensors);
      break;
    case AST_SLICE:
      check_expr(p, x->start, s, tensors);
      check_expr(p, x->stop, s, tensors);
      check_expr(p, x->step, s, tensors);
      break;
    default: break;
  }
}

/* Module-level names: hparams and every member, in any branch. */
static void collect_members(FeProgram *p, PtrVec *members, Scope *s) {
  for (int i = 0; i < members->len; i++) {
    AstStmt *st = members->items[i];
    if (st->kind == ST_LET || st->kind == ST_PARAM || st->kind == ST_INSTANCE)
      scope_add(p, s, st->name);
    if (st->kind == ST_FORWARD && st->name)
      scope_add(p, s, st->name); /* sibling forwards are callable */
    if (st->kind == ST_IF) {
      collect_members(p, &st->body, s);
      collect_members(p, &st->else_body, s);
    }
  }
}

static void check_stmts(FeProgram *p, PtrVec *body, Scope *s) {
  for (int i = 0; i < body->len; i++) {
    AstStmt *st = body->items[i];
    switch (st->kind) {
      case ST_LET:
      case ST_ASSIGN:
        check_expr(p, st->value, s, true);
        scope_add(p, s, st->name);
        break;
      case ST_RETURN: check_expr(p, st->value, s, true); break;
      case ST_IF: {
        check_expr(p, st->cond, s, true);
        /* names assigned in a branch stay visible after it */
        check_stmts(p, &st->body, s);
        check_stmts(p, &st->else_body, s);
        break;
      }
      default:
        diag_error(p->d, st->loc, "this statement is not allowed inside a forward function");
        break;
    }
  }
}

static void check_type_dims(FeProgram *p, AstType *t, Scope *s, bool bind) {
  if (!t || t->kind != AT_TENSOR) return;
  for (int i = 0; i < t->dims.len; i++) {
    AstExpr *dx = t->dims.items[i];
    if (dx->kind == AST_NAME && !scope_has(s, dx->name)) {
      if (bind)
        scope_add(p, s, dx->name); /* a shape variable */
      else
        diag_error(p->d, dx->loc, "unbound shape variable '%s' in the return type", dx->name);
    } else {
      check_expr(p, dx, s, false);
    }
  }
}

static void check_members(FeProgram *p, AstDecl *dcl, PtrVec *members, Scope *mod, Scope *ordered) {
  for (int i = 0; i < members->len; i++) {
    AstStmt *st = members->items[i];
    switch (st->kind) {
      case ST_LET:
        check_expr(p, st->value, ordered, false);
        scope_add(p, ordered, st->name);
        break;
      case ST_PARAM:
        if (st->ptype) check_list(p, &st->ptype->dims, ordered, false);
        if (st->value && st->value->kind == AST_CALL) {
          for (int j = 0; j < st->value->args.len; j++)
            check_expr(p, ((AstArg *)st->value->args.items[j])->value, ordered, false);
        }
        scope_add(p, ordered, st->name);
        break;
      case ST_INSTANCE: {
        AstExpr *c = st->value;
        if (c && c->kind == AST_CALL && c->lhs->kind == AST_NAME) {
          AstDecl *m = fe_find_decl(p, dcl->file, c->lhs->name);
          if (!m) {
            diag_error(p->d, c->lhs->loc, "unknown module '%s'", c->lhs->name);
          } else if (m->kind == DECL_MODEL && dcl->kind == DECL_MODULE) {
            diag_error(p->d, c->lhs->loc, "'%s' is a model; a module can only contain modules",
                       m->name);
          }
          for (int j = 0; j < c->args.len; j++)
            check_expr(p, ((AstArg *)c->args.items[j])->value, ordered, false);
        } else if (c) {
          diag_error(p->d, st->loc, "expected a module instance such as Linear(64, 64)");
        }
        check_expr(p, st->repeat, ordered, false);
        scope_add(p, ordered, st->name);
        break;
      }
      case ST_IF:
        check_expr(p, st->cond, ordered, false);
        check_members(p, dcl, &st->body, mod, ordered);
        check_members(p, dcl, &st->else_body, mod, ordered);
        break;
      case ST_FORWARD: {
        Scope fs = {.parent = mod};
        for (int j = 0; j < st->params.len; j++) {
          AstParam *prm = st->params.items[j];
          scope_add(p, &fs, prm->name);
          if (prm->type) check_type_dims(p, prm->type, &fs, true);
        }
        check_type_dims(p, st->ret, &fs, false);
        check_stmts(p, &st->body, &fs);
        break;
      }
      case ST_SECTION:
        if (dcl->kind != DECL_MODEL)
          diag_error(p->d, st->loc, "a '%s' section belongs in a model, not in module '%s'",
                     st->name, dcl->name);
        break;
      default: break;
    }
  }
}

static void check_decl(FeProgram *p, AstDecl *dcl) {
  Scope mod = {0};
  NameMap hps = {0}; /* hyper-parameter name -> its AstParam */
  for (int i = 0; i < dcl->hparams.len; i++) {
    AstParam *hp = dcl->hparams.items[i];
    AstParam *first = names_get(&hps, hp->name);
    if (first) {
      diag_error(p->d, hp->loc, "duplicate hyper-parameter '%s'", hp->name);
      diag_note(p->d, first->loc, "first declared here");
    } else {
      names_put(&p->ast, &hps, hp->name, hp);
    }
    scope_add(p, &mod, hp->name);
  }
  Scope ordered = {.parent = NULL};
  for (int i = 0; i < mod.n; i++) scope_add(p, &ordered, mod.names[i]);
  /* duplicate members at the top level */
  NameMap seen = {0};     /* member name -> its first let/param/instance */
  NameMap forwards = {0}; /* forward name ("forward": the unnamed one) -> the first */
  for (int i = 0; i < dcl->members.len; i++) {
    AstStmt *a = dcl->members.items[i];
    if (a->kind == ST_FORWARD) {
      const char *fn = a->name ? a->name : "forward";
      AstStmt *b = names_get(&forwards, fn);
      if (b) {
        diag_error(p->d, a->name_loc, "second forward named '%s' in '%s'", fn, dcl->name);
        diag_note(p->d, b->name_loc, "the first forward named '%s' is here", fn);
      } else {
        names_put(&p->ast, &forwards, fn, a);
      }
      continue;
    }
    if (a->kind != ST_LET && a->kind != ST_PARAM && a->kind != ST_INSTANCE) continue;
    AstStmt *b = names_get(&seen, a->name);
    if (b) {
      diag_error(p->d, a->name_loc, "redefinition of '%s'", a->name);
      diag_note(p->d, b->name_loc, "previous definition is here");
    } else {
      names_put(&p->ast, &seen, a->name, a);
    }
    if (names_get(&hps, a->name))
      diag_error(p->d, a->name_loc, "'%s' is already a hyper-parameter of '%s'", a->name,
                 dcl->name);
  }
  collect_members(p, &dcl->members, &mod);
  check_members(p, dcl, &dcl->members, &mod, &ordered);
}

/* ---- model extension: `model D extends B { ... }` ----
 *
 * Resolved once every file is parsed and before the name check: D's member
 * list becomes B's members in B's order, each replaced in place by D's
 * member of the same name (a let, param or instance by its name, a forward
 * by its name or the unnamed forward, a train/parallel section by its
 * kind), followed by D's other members in D's order. D also takes B's
 * hyper-parameters. Everything after loading sees D as if written out. */

typedef struct ExtState {
  PtrVec active; /* AstDecl* whose base is being resolved, outermost first */
  bool too_deep; /* the depth limit was reported (once) */
} ExtState;
/* AstDecl.ext_flags: resolved; reported (or its base was): neither merged
 * nor checked; check_decl done; ... and it reported errors */
enum { EXT_DONE = 1, EXT_FAILED = 2, EXT_CHECKED = 4, EXT_DIRTY = 8 };

static int vec_index(const PtrVec *v, const void *x) {
  for (int i = 0; i < v->len; i++)
    if (v->items[i] == x) return i;
  return -1;
}

static bool is_value_member(const AstStmt *st) {
  return st->kind == ST_LET || st->kind == ST_PARAM || st->kind == ST_INSTANCE;
}

/* Whether member d (of the extending model) replaces member b (of its base). */
static bool replaces(const AstStmt *d, const AstStmt *b) {
  if (is_value_member(d) && is_value_member(b)) return strcmp(d->name, b->name) == 0;
  if (d->kind == ST_FORWARD && b->kind == ST_FORWARD)
    return strcmp(d->name ? d->name : "forward", b->name ? b->name : "forward") == 0;
  if (d->kind == ST_SECTION && b->kind == ST_SECTION) return strcmp(d->name, b->name) == 0;
  return false;
}

/* A let/param/instance called name inside an `if` of members, or NULL. */
static AstStmt *find_in_ifs(PtrVec *members, const char *name, bool top) {
  for (int i = 0; i < members->len; i++) {
    AstStmt *st = members->items[i];
    if (st->kind == ST_IF) {
      AstStmt *r = find_in_ifs(&st->body, name, false);
      if (!r) r = find_in_ifs(&st->else_body, name, false);
      if (r) return r;
    } else if (!top && is_value_member(st) && strcmp(st->name, name) == 0) {
      return st;
    }
  }
  return NULL;
}

static AstFile *file_with_id(FeProgram *p, uint32_t id) {
  for (int i = 0; i < p->files.len; i++) {
    AstFile *f = p->files.items[i];
    if (f->file_id == id) return f;
  }
  return NULL;
}

/* Elaboration looks module names up from the model's own file: an
 * inherited instance must name the same module from there as from the file
 * that declares it (another module of the same name may shadow it). */
static void check_inherited_callees(FeProgram *p, AstDecl *dcl, PtrVec *members) {
  for (int i = 0; i < members->len; i++) {
    AstStmt *st = members->items[i];
    if (st->kind == ST_IF) {
      check_inherited_callees(p, dcl, &st->body);
      check_inherited_callees(p, dcl, &st->else_body);
      continue;
    }
    if (st->kind != ST_INSTANCE || !st->value || st->value->kind != AST_CALL ||
        st->value->lhs->kind != AST_NAME)
      continue;
    AstFile *from = file_with_id(p, st->loc.file);
    if (!from || from == dcl->file) continue;
    const char *callee = st->value->lhs->name;
    AstDecl *there = fe_find_decl(p, from, callee), *here = fe_find_decl(p, dcl->file, callee);
    if (!there || there == here) continue; /* an unknown module is reported in the base */
    diag_error(p->d, dcl->base_loc,
               "'%s' inherits '%s = %s(...)' from '%s', but '%s' seen from this file is another "
               "declaration than where '%s' is written",
               dcl->name, st->name, callee, dcl->base, callee, st->name);
    if (here) diag_note(p->d, here->name_loc, "'%s' seen from '%s' is this one", callee, dcl->name);
    diag_note(p->d, there->name_loc, "'%s' of the inherited member is this one", callee);
  }
}

static void merge_members(FeProgram *p, AstDecl *dcl, AstDecl *base) {
  dcl->own = dcl->members;
  dcl->base_decl = base;
  PtrVec out = {0};
  for (int i = 0; i < base->members.len; i++) ptrvec_push(&p->ast, &out, base->members.items[i]);
  int nb = out.len;
  bool *taken = ARENA_ARRAY(&p->ast, bool, nb + 1);
  for (int i = 0; i < dcl->own.len; i++) {
    AstStmt *m = dcl->own.items[i];
    int hit = -1;
    for (int j = 0; j < nb; j++)
      if (replaces(m, base->members.items[j])) {
        /* a second member of that name in dcl is appended: the checks of
         * the merged list report it as they would in one body */
        if (!taken[j]) hit = j;
        break;
      }
    if (hit < 0 && is_value_member(m)) {
      AstStmt *inner = find_in_ifs(&base->members, m->name, true);
      if (inner) {
        diag_error(p->d, m->name_loc,
                   "cannot replace '%s' of '%s': it is declared inside an 'if' there", m->name,
                   base->name);
        diag_note(p->d, inner->name_loc, "'%s' is declared here", m->name);
      }
    }
    if (hit >= 0) {
      out.items[hit] = m;
      taken[hit] = true;
    } else {
      ptrvec_push(&p->ast, &out, m);
    }
  }
  dcl->members = out;
  if (dcl->hparams.len == 0) dcl->hparams = base->hparams;
  PtrVec inherited = {0};
  for (int j = 0; j < nb; j++)
    if (!taken[j]) ptrvec_push(&p->ast, &inherited, out.items[j]);
  check_inherited_callees(p, dcl, &inherited);
}

/* Resolves dcl's base (first its base's own base) and merges; false when
 * that failed (reported once, here or further down the chain). */
static bool resolve_extends(FeProgram *p, ExtState *x, AstDecl *dcl) {
  if (!dcl->base || (dcl->ext_flags & EXT_DONE)) return true;
  if (dcl->ext_flags & EXT_FAILED) return false;
  AstDecl *b = fe_find_decl(p, dcl->file, dcl->base);
  bool ok = false;
  int cyc = b ? vec_index(&x->active, b) : -1;
  if (!b) {
    diag_error(p->d, dcl->base_loc, "unknown model '%s' (the base of '%s')", dcl->base, dcl->name);
  } else if (b == dcl) {
    diag_error(p->d, dcl->base_loc, "model '%s' extends itself", dcl->name);
  } else if (b->kind != DECL_MODEL) {
    diag_error(p->d, dcl->base_loc,
               "'%s' is a module, not a model: a model can only extend a model", b->name);
    diag_note(p->d, b->name_loc, "'%s' is declared here", b->name);
  } else if (x->active.len >= FE_MAX_EXTENDS) {
    if (!x->too_deep)
      diag_error(p->d, dcl->base_loc,
                 "model extensions nest more than %d deep (a chain of 'extends' this long)",
                 FE_MAX_EXTENDS);
    x->too_deep = true;
  } else if (cyc >= 0) {
    /* reported at the first model of the cycle, with a note per link */
    AstDecl *first = x->active.items[cyc];
    char *chain = arena_strdup(&p->ast, first->name);
    for (int j = cyc + 1; j < x->active.len; j++)
      chain = arena_printf(&p->ast, "%s extends %s", chain, ((AstDecl *)x->active.items[j])->name);
    chain = arena_printf(&p->ast, "%s extends %s extends %s", chain, dcl->name, b->name);
    diag_error(p->d, first->base_loc, "cycle of model extensions: %s", chain);
    for (int j = cyc + 1; j < x->active.len; j++) {
      AstDecl *a = x->active.items[j];
      diag_note(p->d, a->base_loc, "'%s' extends '%s' here", a->name, a->base);
    }
    diag_note(p->d, dcl->base_loc, "'%s' extends '%s' here", dcl->name, dcl->base);
  } else {
    ptrvec_push(&p->ast, &x->active, dcl);
    ok = resolve_extends(p, x, b);
    x->active.len--;
  }
  if (!ok) {
    dcl->ext_flags |= EXT_FAILED;
    return false;
  }
  if (dcl->hparams.len > 0)
    diag_error(p->d, ((AstParam *)dcl->hparams.items[0])->loc,
               "model '%s' extends '%s' and cannot declare hyper-parameters (it has those of '%s')",
               dcl->name, b->name, b->name);
  merge_members(p, dcl, b);
  dcl->ext_flags |= EXT_DONE;
  return true;
}

/* The name check of dcl, after its base's: an extending model whose base
 * has errors is not checked (its inherited members would repeat them).
 * Returns whether dcl is free of errors. */
static bool check_extended(FeProgram *p, ExtState *x, AstDecl *dcl) {
  if (dcl->ext_flags & EXT_CHECKED) return !(dcl->ext_flags & EXT_DIRTY);
  dcl->ext_flags |= EXT_CHECKED;
  bool clean =
      !(dcl->ext_flags & EXT_FAILED) && (!dcl->base_decl || check_extended(p, x, dcl->base_decl));
  if (clean) {
    int before = p->d->errors;
    check_decl(p, dcl);
    clean = p->d->errors == before;
  }
  if (!clean) dcl->ext_flags |= EXT_DIRTY;
  return clean;
}

static FeProgram *load_root(Diag *d, const char *path, const char *text, size_t len,
                            const FeOptions *opts) {
  FeProgram *p = calloc(1, sizeof *p);
  if (!p) mm_die(__FILE__, __LINE__, "out of memory");
  arena_init(&p->ast);
  p->d = d;
  if (opts) p->opts = *opts;
  if (!p->opts.stdlib_dir) {
    const char *env = getenv("MMC_STDLIB");
    p->opts.stdlib_dir = env ? env : MMC_STDLIB_DIR;
  }
  SrcLoc none = {0};
  if (text) {
    uint32_t id = diag_add_buffer(d, path, text, len);
    p->root = parse_loaded(p, id, arena_strdup(&p->ast, path), real_or_same(p, path), none);
  } else {
    p->root = load_file(p, path, none);
  }
  if (!p->root) {
    fe_free(p);
    return NULL;
  }
  if (d->errors) return p; /* syntax or import errors: names would only cascade */
  for (int f = 0; f < p->files.len; f++) {
    AstFile *file = p->files.items[f];
    NameMap seen = {0}; /* declaration name -> the first of that name */
    for (int i = 0; i < file->decls.len; i++) {
      AstDecl *dcl = file->decls.items[i];
      if (dcl->kind == DECL_IMPORT) continue;
      AstDecl *o = names_get(&seen, dcl->name);
      if (o) {
        diag_error(d, dcl->name_loc, "redefinition of '%s'", dcl->name);
        diag_note(d, o->name_loc, "previous definition is here");
      } else {
        names_put(&p->ast, &seen, dcl->name, dcl);
      }
      dcl->file = file;
    }
  }
  ExtState ext = {0};
  for (int f = 0; f < p->files.len; f++) {
    AstFile *file = p->files.items[f];
    for (int i = 0; i < file->decls.len; i++) {
      AstDecl *dcl = file->decls.items[i];
      if (dcl->kind == DECL_MODEL) resolve_extends(p, &ext, dcl);
    }
  }
  for (int f = 0; f < p->files.len; f++) {
    AstFile *file = p->files.items[f];
    for (int i = 0; i < file->decls.len; i++) {
      AstDecl *dcl = file->decls.items[i];
      if (dcl->kind != DECL_IMPORT) check_extended(p, &ext, dcl);
    }
  }
  return p;
}

FeProgram *fe_load(Diag *d, const char *path, const FeOptions *opts) {
  return load_root(d, path, NULL, 0, opts);
}

FeProgram *fe_load_buffer(Diag *d, const char *name, const char *text, size_t len,
                          const FeOptions *opts) {
  return load_root(d, name, text, len, opts);
}

void fe_free(FeProgram *p) {
  if (!p) return;
  if (p->ir) ir_module_free(p->ir);
  arena_free(&p->ast);
  free(p);
}

int fe_model_count(const FeProgram *p) {
  int n = 0;
  for (int i = 0; i < p->root->decls.len; i++)
    if (((AstDecl *)p->root->decls.items[i])->kind == DECL_MODEL) n++;
  return n;
}

const char *fe_model_name(const FeProgram *p, int k) {
  int n = 0;
  for (int i = 0; i < p->root->decls.len; i++) {
    AstDecl *dcl = p->root->decls.items[i];
    if (dcl->kind == DECL_MODEL && n++ == k) return dcl->name;
  }
  return NULL;
}

bool fe_has_decl(const FeProgram *p, const char *name, bool *is_model) {
  AstDecl *dcl = fe_file_decl((FeProgram *)p, p->root, name);
  if (dcl && is_model) *is_model = dcl->kind == DECL_MODEL;
  return dcl != NULL;
}
