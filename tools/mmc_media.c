/* mmc-media: the driver's `mmc image` and `mmc video` in a program of their
 * own. Their libraries (libjpeg, libwebp and FFmpeg's, with FFmpeg's codecs
 * about 120 shared objects) cost every start of a program that links them
 * some 80 ms; mmc, started thousands of times by the tests and by scripts,
 * stays without them and execs this program for the two commands:
 *
 *   mmc-media image|video USAGE-LINE HELP-TEXT ARGS...
 *
 * (tools/mmc.c passes the command's usage line and help text, so that both
 * read as mmc's own.) Exit status: the command's (0 ok, 1 error, 2 usage). */
#include <stdio.h>
#include <string.h>

#include "tools/mmc_image.h"
#include "tools/mmc_video.h"

int main(int argc, char **argv) {
  if (argc >= 4 && strcmp(argv[1], "image") == 0)
    return mmc_image(argc - 4, argv + 4, argv[2], argv[3]);
  if (argc >= 4 && strcmp(argv[1], "video") == 0)
    return mmc_video(argc - 4, argv + 4, argv[2], argv[3]);
  fprintf(stderr, "mmc-media: run by mmc as `mmc image ...` or `mmc video ...`\n");
  return 2;
}
