/* mmc_video.h: the driver's `mmc video` command (tools/mmc_video.c). */
#ifndef MMC_VIDEO_H
#define MMC_VIDEO_H

/* argv: the arguments after "video"; args and help: the command's usage
 * line and text. Returns the exit status: 0 ok, 1 error, 2 usage. */
int mmc_video(int argc, char **argv, const char *args, const char *help);

#endif
