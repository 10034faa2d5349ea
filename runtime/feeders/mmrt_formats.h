/* mmrt_formats.h: the data formats and the inputs each fills, from the
 * table the compiler also reads (ir/data_formats.def). A feeder names the
 * format it serves (MmrtFeeder.format) and looks its inputs up by the
 * table's names: MMRT_IN(CLS_PIXELS) is "pixels". A model whose data
 * section names a format (the descriptor's data_format) is bound to that
 * format's feeder only; a model without one by trying them in order. */
#ifndef MMRT_FORMATS_H
#define MMRT_FORMATS_H

typedef enum MmrtDataFormat {
  MMRT_FMT_AUTO, /* no data section: the feeders are tried in order */
#define DATA_FORMAT(ID, ...) MMRT_FMT_##ID,
#include "../../ir/data_formats.def"
  MMRT_FMT_COUNT
} MmrtDataFormat;

typedef enum MmrtDataInputId {
#define DATA_INPUT(ID, ...) MMRT_DIN_##ID,
#include "../../ir/data_formats.def"
  MMRT_DIN_COUNT
} MmrtDataInputId;

/* indexed by MmrtDataFormat ("auto" first) and by MmrtDataInputId */
extern const char *const mmrt_data_format_names[MMRT_FMT_COUNT];
extern const char *const mmrt_data_input_names[MMRT_DIN_COUNT];
#define MMRT_IN(ID) (mmrt_data_input_names[MMRT_DIN_##ID])

/* The format named `name`, or MMRT_FMT_AUTO when none is. */
MmrtDataFormat mmrt_data_format(const char *name);

#endif
