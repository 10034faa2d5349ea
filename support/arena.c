/* Bump arena: a list of chunks, newest first. */
#include "arena.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ArenaChunk {
  ArenaChunk *next;
  size_t size, used;
  _Alignas(16) unsigned char data[];
};

void arena_init(Arena *a) {
  a->head = NULL;
  a->chunk_size = 64 * 1024;
}

void arena_free(Arena *a) {
  ArenaChunk *c = a->head;
  while (c) {
    ArenaChunk *n = c->next;
    free(c);
    c = n;
  }
  a->head = NULL;
}

void arena_reset(Arena *a) {
  arena_free(a);
}

void *arena_alloc(Arena *a, size_t n) {
  if (a->chunk_size == 0) a->chunk_size = 64 * 1024;
  n = (n + 15) & ~(size_t)15;
  if (n == 0) n = 16;
  ArenaChunk *c = a->head;
  if (!c || c->size - c->used < n) {
    size_t sz = n > a->chunk_size ? n : a->chunk_size;
    c = malloc(sizeof(ArenaChunk) + sz);
    if (!c) mm_die(__FILE__, __LINE__, "out of memory allocating %zu bytes", sz);
    c->size = sz;
    c->used = 0;
    c->next = a->head;
    a->head = c;
  }
  void *p = c->data + c->used;
  c->used += n;
  memset(p, 0, n);
  return p;
}

void *arena_realloc(Arena *a, void *p, size_t old, size_t n) {
  void *q = arena_alloc(a, n);
  if (p && old) memcpy(q, p, old < n ? old : n);
  return q;
}

char *arena_strndup(Arena *a, const char *s, size_t n) {
  char *d = arena_alloc(a, n + 1);
  memcpy(d, s, n);
  d[n] = 0;
  return d;
}

char *arena_strdup(Arena *a, const char *s) {
  return arena_strndup(a, s, strlen(s));
}

char *arena_vprintf(Arena *a, const char *fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  if (n < 0) n = 0;
  char *d = arena_alloc(a, (size_t)n + 1);
  vsnprintf(d, (size_t)n + 1, fmt, ap);
  return d;
}

char *arena_printf(Arena *a, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *s = arena_vprintf(a, fmt, ap);
  va_end(ap);
  return s;
}

void ptrvec_push(Arena *a, PtrVec *v, void *p) {
  if (v->len == v->cap) {
    int nc = v->cap ? v->cap * 2 : 8;
    v->items =
        arena_realloc(a, v->items, sizeof(void *) * (size_t)v->cap, sizeof(void *) * (size_t)nc);
    v->cap = nc;
  }
  v->items[v->len++] = p;
}

void mm_die(const char *file, int line, const char *fmt, ...) {
  fprintf(stderr, "mmc: internal error at %s:%d: ", file, line);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  abort();
}
