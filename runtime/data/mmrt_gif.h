/* mmrt_gif.h: animated GIFs of 8-bit gray frames through giflib (Debian's
 * libgif-dev), for a person to look at clips (mmc-clips, the reconstruct
 * executable). */
#ifndef MMRT_GIF_H
#define MMRT_GIF_H

#include <stddef.h>
#include <stdint.h>

#include "mmrt_log.h"

/* px: F frames of h x w bytes, frame after frame, row major. Written as an
 * animated GIF at path (10 frames a second, looping for ever; a 256-gray
 * palette, so the bytes are kept), beside it first and renamed over it;
 * on failure MMRT_ERR_IO naming the file, and nothing is left at path. */
int mmrt_gif_write_gray(const char *path, int F, int h, int w, const uint8_t *px, char *err,
                        size_t errlen);

#endif
