/* mmrt_stage.c: the loader thread of mmrt_stage.h. */
#include "mmrt_stage.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_BLOCKS 64

typedef struct Block {
  int64_t lo, n;   /* rows [lo, lo + n) of the batch */
  int64_t *sample; /* their samples (-1: padding) */
  void *buf[MMRT_STAGE_BUFS];
} Block;

struct MmrtStage {
  int nbuf;
  size_t row_bytes[MMRT_STAGE_BUFS];
  MmrtStageLay lay;
  void *priv;
  Block blk[MAX_BLOCKS]; /* the blocks filled for the current batch, staged for the next */
  int nblk;
  int64_t cur_epoch, cur_start, fills; /* the trainer's batch filled last; blocks filled of it */
  int64_t *here;                       /* the samples of rows fill lays out itself */
  int64_t here_n;
  MmrtBatchIter shadow;
  int has_shadow;
  pthread_t th;
  int has_thread, quit, work, ready; /* work: a batch to stage; ready: staged */
  pthread_mutex_t mu;
  pthread_cond_t cv;
};

MmrtStage *mmrt_stage_new(int nbuf, const size_t *row_bytes, int64_t rows, MmrtStageLay lay,
                          void *priv) {
  MmrtStage *s = calloc(1, sizeof *s);
  if (!s || nbuf > MMRT_STAGE_BUFS || !(s->here = malloc((size_t)rows * sizeof *s->here))) {
    free(s);
    return NULL;
  }
  s->nbuf = nbuf, s->lay = lay, s->priv = priv, s->here_n = rows, s->cur_epoch = -1;
  memcpy(s->row_bytes, row_bytes, (size_t)nbuf * sizeof *row_bytes);
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  return s;
}

static void lay_block(MmrtStage *s, const MmrtBatchIter *it, int64_t rows, Block *b) {
  s->lay(s->priv, it, rows, b->lo, b->n, b->sample, b->buf);
}

static void *loader_thread(void *arg) {
  MmrtStage *s = arg;
  pthread_mutex_lock(&s->mu);
  for (;;) {
    while (!s->work && !s->quit) pthread_cond_wait(&s->cv, &s->mu);
    if (s->quit) break;
    pthread_mutex_unlock(&s->mu);
    int64_t rows = mmrt_iter_next(&s->shadow); /* the next training batch */
    for (int i = 0; i < s->nblk; i++) lay_block(s, &s->shadow, rows, &s->blk[i]);
    pthread_mutex_lock(&s->mu);
    s->work = 0, s->ready = 1;
    pthread_cond_broadcast(&s->cv);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

int mmrt_stage_start(MmrtStage *s, const MmrtImages *train, int64_t batch, uint64_t seed, char *err,
                     size_t errlen) {
  s->cur_epoch = -1;
  if (mmrt_iter_init(&s->shadow, train, batch, 1, seed, err, errlen) != MMRT_OK) return 1;
  s->has_shadow = 1;
  if (pthread_create(&s->th, NULL, loader_thread, s) != 0)
    return snprintf(err, errlen, "cannot start the loader thread"), 1;
  s->has_thread = 1;
  return 0;
}

static void block_free(Block *b) {
  free(b->sample);
  for (int i = 0; i < MMRT_STAGE_BUFS; i++) free(b->buf[i]);
  memset(b, 0, sizeof *b);
}

static int block_alloc(const MmrtStage *s, Block *b, int64_t lo, int64_t n) {
  int ok = (b->sample = malloc((size_t)n * sizeof *b->sample)) != NULL;
  for (int i = 0; i < s->nbuf && ok; i++)
    ok = !s->row_bytes[i] || (b->buf[i] = malloc((size_t)n * s->row_bytes[i])) != NULL;
  if (!ok) block_free(b);
  b->lo = lo, b->n = ok ? n : 0;
  return ok;
}

void mmrt_stage_fill(MmrtStage *s, const MmrtBatchIter *it, int64_t rows, int64_t lo, int64_t n,
                     void *const *dst) {
  Block here = {lo, n, s->here, {0}};
  for (int i = 0; i < s->nbuf; i++) here.buf[i] = s->row_bytes[i] ? dst[i] : NULL;
  if (!s->has_thread || n > s->here_n) { /* not started (evaluation), or rows it was not made for */
    int64_t *sample = malloc((size_t)n * sizeof *sample);
    if (!sample) abort();
    here.sample = sample;
    lay_block(s, it, rows, &here);
    free(sample);
    return;
  }
  pthread_mutex_lock(&s->mu);
  while (s->work) pthread_cond_wait(&s->cv, &s->mu);
  if (it->epoch != s->cur_epoch || it->cur_start != s->cur_start)
    s->cur_epoch = it->epoch, s->cur_start = it->cur_start, s->fills = 0;
  s->fills++;
  int hit = 0;
  for (int i = 0; s->ready && i < s->nblk && !hit; i++) {
    Block *b = &s->blk[i];
    if (b->lo != lo || b->n != n) continue;
    hit = 1;
    for (int64_t r = 0; r < n && hit; r++)
      hit = b->sample[r] == (lo + r < rows ? mmrt_iter_index(it, lo + r) : -1);
    for (int k = 0; hit && k < s->nbuf; k++)
      if (s->row_bytes[k]) memcpy(dst[k], b->buf[k], (size_t)n * s->row_bytes[k]);
  }
  if (!hit) lay_block(s, it, rows, &here);
  int known = 0; /* the blocks a batch is filled in (one, or one per micro-batch) */
  for (int i = 0; i < s->nblk; i++) known |= s->blk[i].lo == lo && s->blk[i].n == n;
  if (!known && s->nblk < MAX_BLOCKS && block_alloc(s, &s->blk[s->nblk], lo, n)) s->nblk++;
  if (s->fills >= s->nblk) { /* this batch's last block: stage the next batch */
    char st[256], e[256];
    mmrt_iter_state(it, st, sizeof st);
    mmrt_iter_restore(&s->shadow, st, e, sizeof e);
    s->ready = 0, s->work = 1;
    pthread_cond_broadcast(&s->cv);
  }
  pthread_mutex_unlock(&s->mu);
}

void mmrt_stage_free(MmrtStage *s) {
  if (!s) return;
  if (s->has_thread) {
    pthread_mutex_lock(&s->mu);
    s->quit = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->th, NULL);
  }
  for (int i = 0; i < MAX_BLOCKS; i++) block_free(&s->blk[i]);
  if (s->has_shadow) mmrt_iter_free(&s->shadow);
  free(s->here);
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
  free(s);
}
