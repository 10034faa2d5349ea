/* fuzz_input.h: hands a libFuzzer input to a reader that takes a path.
 * The bytes go into one memfd per process, opened by the reader as
 * /proc/self/fd/N (each open starts at offset 0), so no file is left
 * behind and no disk is touched. */
#ifndef FUZZ_INPUT_H
#define FUZZ_INPUT_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

/* Path of a file holding exactly data[0..size); aborts if the memfd
 * cannot be made (a harness failure, not a finding). */
static const char *fuzz_input_path(const uint8_t *data, size_t size) {
  static int fd = -1;
  static char path[64];
  if (fd < 0) {
    fd = memfd_create("fuzz-input", 0);
    if (fd < 0) {
      perror("memfd_create");
      abort();
    }
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  }
  if (ftruncate(fd, 0) != 0 || (size && pwrite(fd, data, size, 0) != (ssize_t)size)) {
    perror("fuzz input");
    abort();
  }
  return path;
}

#endif
