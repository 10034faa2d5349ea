/* mmrt_flags.c: the programs' one argv parser (mmrt_flags.h). */
#include "mmrt_flags.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static int in_variant(const MmrtFlagSet *s, const MmrtFlag *f) {
  return !f->variants || (f->variants & s->variant);
}

static const MmrtFlag *lookup(const MmrtFlagSet *s, const char *name) {
  for (const MmrtFlag *f = s->flags; f->name || f->help; f++)
    if (f->kind != MMRT_FLAG_NOTE && f->name && !strcmp(f->name, name) && in_variant(s, f))
      return f;
  return NULL;
}

/* The template t with %F, %V, %L, %H and %D filled, to out. */
static void expand(FILE *out, const char *t, const MmrtFlag *f, const char *value,
                   const char *dflt) {
  for (; *t; t++) {
    if (*t != '%' || !t[1]) {
      fputc(*t, out);
      continue;
    }
    switch (*++t) {
      case 'F': fputs(f ? f->name : "", out); break;
      case 'V': fputs(value ? value : "", out); break;
      case 'L': fprintf(out, "%lld", f ? (long long)f->lo : 0LL); break;
      case 'H': fprintf(out, "%lld", f ? (long long)f->hi : 0LL); break;
      case 'D': fputs(dflt ? dflt : "", out); break;
      default: fputc(*t, out);
    }
  }
}

static int failf(const MmrtFlagSet *s, const char *t, const MmrtFlag *f, const char *value) {
  fprintf(stderr, "%s: error: ", s->who);
  expand(stderr, t, f, value, NULL);
  fputc('\n', stderr);
  return 1;
}

static int is_choice(const char *choices, const char *v) {
  size_t n = strlen(v);
  for (const char *c = choices; c && *c;) {
    const char *e = strchr(c, '|');
    size_t k = e ? (size_t)(e - c) : strlen(c);
    if (k == n && !strncmp(c, v, n)) return 1;
    c = e ? e + 1 : c + k;
  }
  return 0;
}

static void *field(void *args, size_t at) {
  return (char *)args + at;
}

/* One value of flag f into args; 0, or 1 after its message. */
static int take(const MmrtFlagSet *s, const MmrtFlag *f, const char *v, void *args) {
  switch (f->kind) {
    case MMRT_FLAG_INT: {
      int64_t n = -1;
      if (!(f->choices && !strcmp(v, f->choices))) {
        char *end;
        errno = 0;
        long long x = strtoll(v, &end, 10);
        if (!*v || *end || errno || x < f->lo || x > f->hi) return failf(s, f->bad, f, v);
        n = x;
      }
      memcpy(field(args, f->at), &n, sizeof n); /* int64_t or uint64_t (a seed) */
      return 0;
    }
    case MMRT_FLAG_FLOAT: {
      char *end;
      errno = 0;
      double x = strtod(v, &end);
      if (!*v || *end || !isfinite(x) || x < f->min || (f->min_open && !(x > f->min)))
        return failf(s, f->bad, f, v);
      *(double *)field(args, f->at) = x;
      return 0;
    }
    case MMRT_FLAG_ENUM: /* the choice itself, as a string */
      if (!is_choice(f->choices, v)) return failf(s, f->bad, f, v);
      *(const char **)field(args, f->at) = v;
      return 0;
    case MMRT_FLAG_STRING: *(const char **)field(args, f->at) = v; return 0;
    case MMRT_FLAG_LIST: {
      int *n = field(args, f->count);
      if (*n >= f->hi) return failf(s, f->bad, f, v);
      ((const char **)field(args, f->at))[(*n)++] = v;
      return 0;
    }
    default: return 0;
  }
}

int mmrt_flags_parse(const MmrtFlagSet *s, int argc, char **argv, void *args, const char *head) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      if (head) fputs(head, stdout);
      mmrt_flags_usage(s, stdout, args);
      return -1;
    }
    const MmrtFlag *f = lookup(s, a);
    if (!f) {
      fprintf(stderr, "%s: error: unknown option '%s'\n", s->who, a);
      if (head) fputs(head, stderr);
      mmrt_flags_usage(s, stderr, args);
      return 1;
    }
    if (f->has_seen && !*(int *)field(args, f->seen)) *(int *)field(args, f->seen) = i;
    if (f->kind == MMRT_FLAG_BOOL) {
      *(int *)field(args, f->at) = 1;
      continue;
    }
    if (f->kind == MMRT_FLAG_LIST && f->greedy) {
      int k = 0;
      for (; i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0; k++)
        if (take(s, f, argv[++i], args)) return 1;
      if (!k) return failf(s, f->none, f, NULL);
      continue;
    }
    if (!v) return failf(s, s->needs_value, f, NULL);
    if (take(s, f, v, args)) return 1;
    i++;
  }
  return 0;
}

/* The destination's value as text, for %D. */
static void value_text(const MmrtFlag *f, const void *args, char *buf, size_t n) {
  const char *p = (const char *)args + f->at;
  buf[0] = 0;
  if (f->kind == MMRT_FLAG_INT) {
    int64_t v;
    memcpy(&v, p, sizeof v);
    snprintf(buf, n, "%lld", (long long)v);
  } else if (f->kind == MMRT_FLAG_FLOAT) {
    snprintf(buf, n, "%g", *(const double *)p);
  } else if (f->kind == MMRT_FLAG_STRING || f->kind == MMRT_FLAG_ENUM) {
    const char *s = *(const char *const *)p;
    snprintf(buf, n, "%s", s ? s : "");
  }
}

void mmrt_flags_usage(const MmrtFlagSet *s, FILE *out, const void *args) {
  for (const MmrtFlag *f = s->flags; f->name || f->help; f++) {
    if (!in_variant(s, f)) continue;
    char dflt[64];
    if (f->kind == MMRT_FLAG_NOTE) {
      expand(out, f->help, f, NULL, NULL);
      fputc('\n', out);
      continue;
    }
    value_text(f, args, dflt, sizeof dflt);
    int w = fprintf(out, "  %s%s%s", f->name, f->meta ? " " : "", f->meta ? f->meta : "");
    fprintf(out, "%*s", w < s->col ? s->col - w : 2, "");
    /* the text, each line after the first at the column */
    for (const char *t = f->help; *t;) {
      const char *e = strchr(t, '\n');
      size_t k = e ? (size_t)(e - t) : strlen(t);
      char line[512];
      snprintf(line, sizeof line, "%.*s", (int)k, t);
      expand(out, line, f, NULL, dflt);
      fputc('\n', out);
      if (!e) break;
      t = e + 1;
      fprintf(out, "%*s", s->col, "");
    }
  }
}

const char *mmrt_flags_peek(int argc, char **argv, const char *name) {
  const char *v = NULL;
  size_t n = strlen(name);
  for (int i = 1; argv && i < argc && argv[i]; i++) {
    if (!strcmp(argv[i], name) && i + 1 < argc)
      v = argv[++i];
    else if (!strncmp(argv[i], name, n) && argv[i][n] == '=')
      v = argv[i] + n + 1;
  }
  return v;
}
