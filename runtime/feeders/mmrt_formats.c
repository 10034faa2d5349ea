/* mmrt_formats.c: the data formats' and their inputs' names, from the
 * table the compiler also reads (see mmrt_formats.h). Kept apart from the
 * feeders' table so that a feeder can look its inputs up without depending
 * on the file that lists the feeders. */
#include <string.h>

#include "mmrt_formats.h"

const char *const mmrt_data_format_names[MMRT_FMT_COUNT] = {
    "auto",
#define DATA_FORMAT(ID, NAME, ...) NAME,
#include "../../ir/data_formats.def"
};
const char *const mmrt_data_input_names[MMRT_DIN_COUNT] = {
#define DATA_INPUT(ID, FMT, NAME, ...) NAME,
#include "../../ir/data_formats.def"
};

MmrtDataFormat mmrt_data_format(const char *name) {
  for (int f = 1; name && f < MMRT_FMT_COUNT; f++)
    if (!strcmp(mmrt_data_format_names[f], name)) return (MmrtDataFormat)f;
  return MMRT_FMT_AUTO;
}
