/* Device descriptions (issue 32): what the cost model (passes/cost.h)
 * needs to know of one accelerator and the links between them, read from a
 * small text file of `key = value` lines (`#` starts a comment) such as
 * devices/a100.dev, or written by `mmc calibrate` for this machine. Every
 * key is a row of MM_DEVICE_KEYS below; docs/planner.md describes them. */
#ifndef MMC_DEVICE_H
#define MMC_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* X(field, key, required, min, max, help) */
#define MM_DEVICE_KEYS(X)                                                                          \
  X(bf16_tflops, "bf16_tflops", 1, 1e-6, 1e6, "dense bf16 matrix-multiply peak, TFLOP/s")          \
  X(fp32_tflops, "fp32_tflops", 1, 1e-6, 1e6, "dense fp32 matrix-multiply peak, TFLOP/s")          \
  X(vector_tflops, "vector_tflops", 0, 1e-6, 1e6,                                                  \
    "elementwise and attention-kernel fp32 rate, TFLOP/s (default: fp32_tflops)")                  \
  X(matmul_efficiency, "matmul_efficiency", 0, 1e-3, 1,                                            \
    "fraction of the matmul peak a large product reaches (default 1)")                             \
  X(attention_efficiency, "attention_efficiency", 0, 1e-3, 1,                                      \
    "fraction of the matmul rate the attention kernels reach (default 1)")                         \
  X(mem_gb, "mem_gb", 1, 1e-3, 1e6, "memory capacity per device, GB (1e9 bytes)")                  \
  X(mem_bw_gbs, "mem_bw_gbs", 1, 1e-3, 1e6, "memory bandwidth, GB/s")                              \
  X(op_overhead_us, "op_overhead_us", 0, 0, 1e6, "fixed time per op (launch, dispatch), us")       \
  X(devices_per_node, "devices_per_node", 1, 1, 1 << 20, "devices sharing the intra-node link")    \
  X(intra_bw_gbs, "intra_bw_gbs", 1, 1e-6, 1e6, "one device's bandwidth inside a node, GB/s")      \
  X(intra_lat_us, "intra_lat_us", 1, 0, 1e6, "latency of one message inside a node, us")           \
  X(inter_bw_gbs, "inter_bw_gbs", 1, 1e-6, 1e6, "one device's bandwidth across nodes, GB/s")       \
  X(inter_lat_us, "inter_lat_us", 1, 0, 1e6, "latency of one message across nodes, us")            \
  X(attention_score_bytes, "attention_score_bytes", 0, 0, 1e3,                                     \
    "bytes the attention forward's kernels move per score (0: fused, kept on chip)")               \
  X(attention_score_bytes_bwd, "attention_score_bytes_bwd", 0, 0, 1e3,                             \
    "bytes the attention backward's kernels move per score (0: fused)")                            \
  X(matmul_overhead_us, "matmul_overhead_us", 0, 0, 1e6,                                           \
    "fixed time of a product call, us (default: op_overhead_us)")                                  \
  X(attention_overhead_us, "attention_overhead_us", 0, 0, 1e6,                                     \
    "fixed time of an attention kernel call, us (default: op_overhead_us)")                        \
  X(attention_item_us, "attention_item_us", 0, 0, 1e6,                                             \
    "the attention kernels' time per work item (a batch row, head and 64-query tile), us "         \
    "(default 0)")                                                                                 \
  X(attention_score_ns, "attention_score_ns", 0, 0, 1e6,                                           \
    "the attention forward kernel's time per score besides its FLOPs (softmax), ns (default 0)")   \
  X(attention_score_ns_bwd, "attention_score_ns_bwd", 0, 0, 1e6,                                   \
    "the same for the attention backward kernel, ns (default 0)")                                  \
  X(conv_overhead_us, "conv_overhead_us", 0, 0, 1e6,                                               \
    "fixed time of a convolution call, forward or backward, us (default: matmul_overhead_us)")     \
  X(comm_compute_share, "comm_compute_share", 0, 0, 1,                                             \
    "fraction of a non-blocking collective's time the rank's compute loses to it (default 0)")     \
  X(parallel_overhead_us, "parallel_overhead_us", 0, 0, 1e6,                                       \
    "fixed time of a vector op the trainer splits over its threads, us (default: op_overhead_us)") \
  X(threads, "threads", 0, 1, 4096,                                                                \
    "threads a rank's kernels run on: vector_tflops is all of theirs, a one-thread op's a share "  \
    "(default 1)")                                                                                 \
  X(cache_kb, "cache_kb", 0, 0, 1 << 30,                                                           \
    "data a one-thread op finds in cache (its operands and results), KiB (default 0: none)")       \
  X(cache_bw_gbs, "cache_bw_gbs", 0, 1e-3, 1e6,                                                    \
    "bandwidth of such an op's data in cache, GB/s (default: mem_bw_gbs)")                         \
  X(llc_kb, "llc_kb", 0, 0, 1 << 30,                                                               \
    "the last-level cache's share of a rank (its size over the ranks sharing it), KiB (default "   \
    "0: "                                                                                          \
    "none)")                                                                                       \
  X(llc_bw_gbs, "llc_bw_gbs", 0, 1e-3, 1e6,                                                        \
    "streaming bandwidth of a rank whose whole step's data fits in llc_kb, GB/s (default: "        \
    "mem_bw_gbs)")                                                                                 \
  X(cold_bw_gbs, "cold_bw_gbs", 0, 1e-3, 1e6,                                                      \
    "a core's bandwidth for the operands such an op finds evicted from its cache (used more than " \
    "cache_kb before), GB/s (default: cache_bw_gbs, no such cost)")                                \
  X(remote_bw_gbs, "remote_bw_gbs", 0, 0, 1e6,                                                     \
    "a core's bandwidth for the operands a one-thread op that fits in its cache finds written by " \
    "the other threads (their share of an op split over them), GB/s, besides its own time "        \
    "(default 0: no such cost)")                                                                   \
  X(row_ns, "row_ns", 0, 0, 1e6,                                                                   \
    "a row-wise kernel's time per row besides its elements (norms, softmax, cross-entropy), ns "   \
    "(default 0)")

typedef struct MmDevice {
  char name[128]; /* the `name` key, else the file's base name */
  char path[512]; /* where it was read from */
#define MM_DEV_FIELD(f, k, req, lo, hi, help) double f;
  MM_DEVICE_KEYS(MM_DEV_FIELD)
#undef MM_DEV_FIELD
} MmDevice;

/* Reads a description: spec is a path (it has a '/' or ends in .dev) or a
 * name looked up as NAME.dev in $MMC_DEVICES_DIR, then the source tree's
 * devices/. False with "FILE:LINE: message" in err (an unknown or repeated
 * key, a value that is not a number or out of range, a missing required
 * key, a line that is not key = value). */
bool mm_device_load(const char *spec, MmDevice *d, char *err, size_t errn);
/* Parses the text of a description (file names the messages). */
bool mm_device_parse(const char *text, const char *file, MmDevice *d, char *err, size_t errn);
/* Writes d as a description (every key, with its help as a comment). */
void mm_device_write(FILE *out, const MmDevice *d, const char *header);
/* The folder the built-in descriptions are in. */
const char *mm_device_dir(void);

#endif
