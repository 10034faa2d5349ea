/* mmrt_gif.c: animated gray GIFs (see mmrt_gif.h). */
#include "mmrt_gif.h"

#include <errno.h>
#include <fcntl.h>
#include <gif_lib.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int mmrt_gif_write_gray(const char *path, int F, int h, int w, const uint8_t *px, char *err,
                        size_t errlen) {
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  int ge = 0, fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0666); /* the umask's mode, as PNGs */
  if (fd < 0)
    return mmrt_errf(err, errlen, MMRT_ERR_IO, "%s: cannot write: %s", tmp, strerror(errno));
  GifFileType *g = EGifOpenFileHandle(fd, &ge); /* EGifCloseFile closes fd */
  if (!g) {
    close(fd), remove(tmp);
    return mmrt_errf(err, errlen, MMRT_ERR_IO, "%s: cannot write: %s", tmp, GifErrorString(ge));
  }
  GifColorType gray[256];
  for (int i = 0; i < 256; i++) gray[i].Red = gray[i].Green = gray[i].Blue = (GifByteType)i;
  ColorMapObject *cmap = GifMakeMapObject(256, gray);
  /* the loop and frame-delay extensions are GIF89a's; giflib writes 87a unless told */
  EGifSetGifVersion(g, true);
  static const GifByteType loop[3] = {1, 0, 0}; /* NETSCAPE2.0: loop forever */
  const GifByteType gce[4] = {0, 10, 0, 0};     /* 10/100 s a frame */
  int ok = cmap && EGifPutScreenDesc(g, w, h, 8, 0, cmap) == GIF_OK &&
           EGifPutExtensionLeader(g, APPLICATION_EXT_FUNC_CODE) == GIF_OK &&
           EGifPutExtensionBlock(g, 11, "NETSCAPE2.0") == GIF_OK &&
           EGifPutExtensionBlock(g, 3, loop) == GIF_OK && EGifPutExtensionTrailer(g) == GIF_OK;
  for (int t = 0; ok && t < F; t++) {
    ok = EGifPutExtension(g, GRAPHICS_EXT_FUNC_CODE, 4, gce) == GIF_OK &&
         EGifPutImageDesc(g, 0, 0, w, h, false, NULL) == GIF_OK;
    for (int r = 0; ok && r < h; r++)
      ok = EGifPutLine(g, (GifPixelType *)(px + ((size_t)t * (size_t)h + (size_t)r) * (size_t)w),
                       w) == GIF_OK;
  }
  int why = g->Error;
  GifFreeMapObject(cmap);
  if (EGifCloseFile(g, &ge) != GIF_OK && ok) ok = 0, why = ge;
  if (!ok || rename(tmp, path) != 0) {
    remove(tmp);
    return mmrt_errf(err, errlen, MMRT_ERR_IO, "%s: cannot write: %s", path,
                     ok ? strerror(errno) : GifErrorString(why));
  }
  return MMRT_OK;
}
