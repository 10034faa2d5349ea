/* Bump arenas with chained chunks. Everything allocated from an Arena lives
 * until arena_free (or arena_reset); nothing is freed one object at a time.
 * Lifetimes: one arena for the AST, one per IR graph, one scratch per pass. */
#ifndef MM_SUPPORT_ARENA_H
#define MM_SUPPORT_ARENA_H

#include <stdarg.h>
#include <stddef.h>

typedef struct ArenaChunk ArenaChunk;
typedef struct Arena {
  ArenaChunk *head;
  size_t chunk_size; /* default size of a new chunk */
} Arena;

void arena_init(Arena *a);
void arena_free(Arena *a);
void arena_reset(Arena *a);
void *arena_alloc(Arena *a, size_t n);                        /* zeroed, 16-aligned */
void *arena_realloc(Arena *a, void *p, size_t old, size_t n); /* copy into new block */
char *arena_strdup(Arena *a, const char *s);
char *arena_strndup(Arena *a, const char *s, size_t n);
char *arena_printf(Arena *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
char *arena_vprintf(Arena *a, const char *fmt, va_list ap);

#define ARENA_NEW(a, T)      ((T *)arena_alloc((a), sizeof(T)))
#define ARENA_ARRAY(a, T, n) ((T *)arena_alloc((a), sizeof(T) * (size_t)(n)))

/* A growable array of pointers living in an arena. */
typedef struct PtrVec {
  void **items;
  int len, cap;
} PtrVec;
void ptrvec_push(Arena *a, PtrVec *v, void *p);

/* Internal invariants: print where and abort. Never for user errors. */
_Noreturn void mm_die(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define MM_ASSERT(c)                                                                               \
  do {                                                                                             \
    if (!(c)) mm_die(__FILE__, __LINE__, "assertion failed: %s", #c);                              \
  } while (0)
#define MM_UNREACHABLE() mm_die(__FILE__, __LINE__, "unreachable")

#endif
