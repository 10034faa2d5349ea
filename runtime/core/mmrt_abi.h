/* mmrt_abi.h: the C prototypes of one section of mmrt_abi.def. Included
 * (no include guard) by the header that owns the section, after the types
 * its prototypes use:
 *   #define MMRT_ABI_SECTION_KERNELS
 *   #include "mmrt_abi.h"
 * declares every MMRT_FN(KERNELS, ...) entry. */
#define i32(n)            int n
#define i64(n)            int64_t n
#define size(n)           size_t n
#define u64(n)            uint64_t n
#define f32(n)            float n
#define f64(n)            double n
#define en(T, n)          T n
#define ptr(T, n)         T *n
#define MMRT_ABI_ON(decl) decl
#define MMRT_ABI_OFF(decl)
#ifdef MMRT_ABI_SECTION_KERNELS
#define MMRT_ABI_KERNELS MMRT_ABI_ON
#else
#define MMRT_ABI_KERNELS MMRT_ABI_OFF
#endif
#ifdef MMRT_ABI_SECTION_RNG
#define MMRT_ABI_RNG MMRT_ABI_ON
#else
#define MMRT_ABI_RNG MMRT_ABI_OFF
#endif
#ifdef MMRT_ABI_SECTION_COMM
#define MMRT_ABI_COMM MMRT_ABI_ON
#else
#define MMRT_ABI_COMM MMRT_ABI_OFF
#endif
#ifdef MMRT_ABI_SECTION_MAIN
#define MMRT_ABI_MAIN MMRT_ABI_ON
#else
#define MMRT_ABI_MAIN MMRT_ABI_OFF
#endif
#ifdef MMRT_ABI_SECTION_PROF
#define MMRT_ABI_PROF MMRT_ABI_ON
#else
#define MMRT_ABI_PROF MMRT_ABI_OFF
#endif
#ifdef MMRT_ABI_SECTION_LIBM
#define MMRT_ABI_LIBM MMRT_ABI_ON
#else
#define MMRT_ABI_LIBM MMRT_ABI_OFF
#endif
#define MMRT_FN(sec, ret, name, args) MMRT_ABI_##sec(ret name args;)
#include "mmrt_abi.def"
#undef MMRT_FN
#undef MMRT_ABI_KERNELS
#undef MMRT_ABI_RNG
#undef MMRT_ABI_COMM
#undef MMRT_ABI_MAIN
#undef MMRT_ABI_LIBM
#undef MMRT_ABI_PROF
#undef MMRT_ABI_ON
#undef MMRT_ABI_OFF
#undef MMRT_ABI_SECTION_KERNELS
#undef MMRT_ABI_SECTION_RNG
#undef MMRT_ABI_SECTION_COMM
#undef MMRT_ABI_SECTION_MAIN
#undef MMRT_ABI_SECTION_LIBM
#undef MMRT_ABI_SECTION_PROF
#undef i32
#undef i64
#undef size
#undef u64
#undef f32
#undef f64
#undef en
#undef ptr
