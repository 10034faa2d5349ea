/* mmc_image.h: the driver's `mmc image` command (tools/mmc_image.c). */
#ifndef MMC_IMAGE_H
#define MMC_IMAGE_H

/* argv: the arguments after "image"; args and help: the command's usage
 * line and text. Returns the exit status: 0 ok, 1 error, 2 usage. */
int mmc_image(int argc, char **argv, const char *args, const char *help);

#endif
