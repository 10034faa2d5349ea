/* mmrt_indexed.h: Megatron's indexed dataset (PREFIX.bin + PREFIX.idx, as
 * megatron.core.datasets.indexed_dataset and Megatron-LM's
 * tools/preprocess_data.py write it): a reader over mmap and an atomic writer.
 *
 * PREFIX.idx, little-endian, packed (no alignment):
 *   9 bytes   "MMIDIDX\0\0"
 *   u64       version, 1
 *   u8        dtype code of the .bin's elements (enum MmrtIdxDtype)
 *   u64       S, the sequence count
 *   u64       D, the document-index count (documents + 1)
 *   i32[S]    sequence lengths, in elements
 *   i64[S]    sequence pointers, byte offsets into the .bin
 *   i64[D]    document indices: 0, then the sequence index that ends each
 *             document (non-decreasing; an empty document repeats one), S last
 *   i8[S]     sequence modes (only in a "multimodal" dataset)
 * PREFIX.bin: the sequences' elements back to back.
 *
 * The reader checks everything it later relies on (header, sizes, each
 * length, pointer and document index, the .bin's size) so that reading any
 * sequence afterwards cannot go out of bounds; errors name the file and the
 * sequence or document. Nothing here exits. */
#ifndef MMRT_INDEXED_H
#define MMRT_INDEXED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Megatron's DType codes. */
typedef enum MmrtIdxDtype {
  MMRT_IDX_U8 = 1,
  MMRT_IDX_I8 = 2,
  MMRT_IDX_I16 = 3,
  MMRT_IDX_I32 = 4,
  MMRT_IDX_I64 = 5,
  MMRT_IDX_F64 = 6,
  MMRT_IDX_F32 = 7,
  MMRT_IDX_U16 = 8,
} MmrtIdxDtype;

/* Name ("uint16") and element size of a code; NULL and 0 for an unknown code. */
const char *mmrt_idx_dtype_name(int code);
size_t mmrt_idx_dtype_size(int code);
bool mmrt_idx_dtype_is_int(int code);
/* What preprocess_data.py picks for a vocabulary: uint16 below 65500, else int32. */
MmrtIdxDtype mmrt_idx_dtype_for_vocab(int64_t vocab_size);

typedef struct MmrtIndexed {
  char *idx_path, *bin_path;
  MmrtIdxDtype dtype;
  size_t elem;              /* bytes per element */
  uint64_t nseq, ndocidx;   /* S and D; documents = D - 1 */
  uint64_t ntokens;         /* sum of the lengths */
  bool multimodal;          /* the .idx carries i8 modes after the document indices */
  const uint8_t *idx, *bin; /* the mapped files */
  size_t idx_size, bin_size;
  const uint8_t *lengths_at, *pointers_at, *docs_at, *modes_at; /* into idx (unaligned) */
} MmrtIndexed;

/* Opens PREFIX.idx and PREFIX.bin. multimodal: -1 tells from the .idx's size
 * (modes present when it is S bytes longer than without), 0 or 1 requires
 * one layout. Returns false with "FILE: what" (naming the sequence or
 * document index when one is wrong) in err; d is then closed. */
bool mmrt_indexed_open(const char *prefix, int multimodal, MmrtIndexed *d, char *err,
                       size_t errlen);
/* The same with the two paths given apart. */
bool mmrt_indexed_open_files(const char *idx_path, const char *bin_path, int multimodal,
                             MmrtIndexed *d, char *err, size_t errlen);
void mmrt_indexed_close(MmrtIndexed *d);

/* Sequence i's length (elements), byte pointer and mode (0 unless multimodal);
 * document index j (j < D). Bounds are the caller's (i < S). */
int32_t mmrt_indexed_length(const MmrtIndexed *d, uint64_t i);
int64_t mmrt_indexed_pointer(const MmrtIndexed *d, uint64_t i);
int64_t mmrt_indexed_docidx(const MmrtIndexed *d, uint64_t j);
int8_t mmrt_indexed_mode(const MmrtIndexed *d, uint64_t i);
/* Element k of sequence i as an integer (a float dtype's value truncated and
 * saturated, NaN as 0) or as a double. */
int64_t mmrt_indexed_token(const MmrtIndexed *d, uint64_t i, uint64_t k);
double mmrt_indexed_value(const MmrtIndexed *d, uint64_t i, uint64_t k);

/* The writer: PREFIX.bin and PREFIX.idx are built as temporary files beside
 * them and renamed into place by finish (.bin first, then .idx), so a failed
 * or aborted run leaves neither. Like IndexedDatasetBuilder: add sequences,
 * end each document. */
typedef struct MmrtIndexedWriter MmrtIndexedWriter;

MmrtIndexedWriter *mmrt_indexed_writer_open(const char *prefix, MmrtIdxDtype dtype, bool multimodal,
                                            char *err, size_t errlen);
/* One sequence of n ids; an id the dtype cannot hold is an error naming the
 * sequence (integer dtypes only; float dtypes store the value). */
bool mmrt_indexed_writer_add(MmrtIndexedWriter *w, const int64_t *ids, size_t n, int8_t mode,
                             char *err, size_t errlen);
bool mmrt_indexed_writer_add32(MmrtIndexedWriter *w, const int32_t *ids, size_t n, int8_t mode,
                               char *err, size_t errlen);
/* Closes the current document (it may hold no sequence, as in Megatron). */
bool mmrt_indexed_writer_end_document(MmrtIndexedWriter *w, char *err, size_t errlen);
uint64_t mmrt_indexed_writer_sequences(const MmrtIndexedWriter *w);
uint64_t mmrt_indexed_writer_tokens(const MmrtIndexedWriter *w);
/* Writes the .idx, syncs both files and renames them into place; frees w.
 * On failure nothing is left behind. */
bool mmrt_indexed_writer_finish(MmrtIndexedWriter *w, char *err, size_t errlen);
/* Removes the temporary files and frees w (NULL is fine). */
void mmrt_indexed_writer_abort(MmrtIndexedWriter *w);

#endif
