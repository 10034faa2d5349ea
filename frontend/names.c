/* NameMap: a string -> pointer hash table in an arena (open addressing,
 * FNV-1a), for the frontend's scopes and duplicate checks, so that name
 * lookup stays linear in the number of names of a file. */
#include <string.h>

#include "fe_internal.h"

static uint32_t name_hash(const char *s) {
  uint32_t h = 2166136261u;
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 16777619u;
  return h;
}

void *names_get(const NameMap *m, const char *key) {
  if (!m->cap) return NULL;
  for (uint32_t i = name_hash(key) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
    if (!m->keys[i]) return NULL;
    if (strcmp(m->keys[i], key) == 0) return m->vals[i];
  }
}

static void put_slot(NameMap *m, const char *key, void *val) {
  for (uint32_t i = name_hash(key) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
    if (!m->keys[i]) {
      m->keys[i] = key;
      m->vals[i] = val;
      m->n++;
      return;
    }
    if (strcmp(m->keys[i], key) == 0) {
      m->vals[i] = val;
      return;
    }
  }
}

void names_put(Arena *a, NameMap *m, const char *key, void *val) {
  if (2 * (m->n + 1) > m->cap) { /* at most half full */
    NameMap old = *m;
    m->cap = old.cap ? old.cap * 2 : 8;
    m->n = 0;
    m->keys = ARENA_ARRAY(a, const char *, m->cap);
    m->vals = ARENA_ARRAY(a, void *, m->cap);
    for (uint32_t i = 0; i < old.cap; i++)
      if (old.keys[i]) put_slot(m, old.keys[i], old.vals[i]);
  }
  put_slot(m, key, val);
}
