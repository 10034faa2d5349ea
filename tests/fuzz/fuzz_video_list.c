/* libFuzzer target: the video list reader (mmrt_vdec_json_read_ex:
 * OpenSoraPlan's JSON list and JSON Lines, json-c, each entry's checks) on
 * arbitrary bytes.  Byte 0 picks the request: bit 0 the name (.json or
 * .jsonl), bit 1 keep_bad (skip), bits 2-4 the frame count (1-8), bit 5
 * an fps of 8 (else the source's); the rest is the file, written to
 * /dev/shm/fuzz-video-list.PID/list.json[l].  Paths in it are resolved
 * against that folder (the reader only stats them).  A read that succeeds
 * must give at least one entry, and each a path and a caption, or with
 * keep_bad a message "FILE: entry I: ..."; the fields of a good entry
 * must be in range. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mmrt_vdec.h"

static char dir[64], path[96];

static void cleanup(void) {
  unlink(path), rmdir(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  if (!dir[0]) {
    snprintf(dir, sizeof dir, "/dev/shm/fuzz-video-list.%d", (int)getpid());
    mkdir(dir, 0700);
    atexit(cleanup);
  }
  uint8_t b = data[0];
  snprintf(path, sizeof path, "%s/list.json%s", dir, (b & 1) ? "l" : "");
  FILE *f = fopen(path, "wb");
  if (!f) abort();
  if (size > 1 && fwrite(data + 1, 1, size - 1, f) != size - 1) abort();
  fclose(f);
  MmrtVdecSpec spec = {.frames = 1 + ((b >> 2) & 7), .fps = (b & 32) ? 8 : 0, .h = 4, .w = 4};
  MmrtVdecEntry *e = NULL;
  int n = 0, keep = (b >> 1) & 1;
  char err[1024];
  if (mmrt_vdec_json_read_ex(path, &spec, keep, &e, &n, err, sizeof err) == MMRT_OK) {
    if (n < 1 || !e) abort();
    for (int i = 0; i < n; i++) {
      if (e[i].bad) {
        if (!keep || strncmp(e[i].bad, path, strlen(path)) != 0) abort();
        continue;
      }
      if (!e[i].path || !e[i].cap || e[i].num_frames < 1 || !(e[i].fps > 0) || e[i].height < 1 ||
          e[i].width < 1)
        abort();
    }
  } else if (e || n || !err[0])
    abort();
  mmrt_vdec_json_free(e, n);
  unlink(path);
  return 0;
}
