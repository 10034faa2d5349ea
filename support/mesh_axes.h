/* support/mesh_axes.h: the mesh's axes (support/mesh_axes.def) and the
 * arithmetic both the compiler and the runtime do on them: the number of
 * ranks, and a rank's number <-> its coordinates.  Header only: the runtime
 * links no file of support/. */
#ifndef MM_SUPPORT_MESH_AXES_H
#define MM_SUPPORT_MESH_AXES_H
#include <stdint.h>

#define MESH_IF_Y(...) __VA_ARGS__
#define MESH_IF_N(...)

typedef enum MeshAxis {
#define MESH_AXIS(ID, name, nest, ir) MESH_##ID,
#include "mesh_axes.def"
  MESH_NAXES
} MeshAxis;

/* The axes that split tensors in the IR: MESH_NIR of them, the first rows. */
enum {
  MESH_NIR = 0
#define MESH_AXIS(ID, name, nest, ir) MESH_IF_##ir(+1)
#include "mesh_axes.def"
};
#define MESH_AXIS(ID, name, nest, ir)                                                              \
  MESH_IF_##ir(_Static_assert((int)MESH_##ID < (int)MESH_NIR, "mesh_axes.def: IR axes come "       \
                                                              "first");)
#include "mesh_axes.def"

/* "dp", "cp", ... ("?" out of range). */
static inline const char *mesh_axis_name(int a) {
  static const char *const names[MESH_NAXES] = {
#define MESH_AXIS(ID, name, nest, ir) #name,
#include "mesh_axes.def"
  };
  return a >= 0 && a < MESH_NAXES ? names[a] : "?";
}

/* The first n axes (MESH_NAXES, or MESH_NIR for the IR's mesh) from the
 * outermost to the innermost of the rank numbering. */
static inline void mesh_order(int n, int order[MESH_NAXES]) {
  static const int nest[MESH_NAXES] = {
#define MESH_AXIS(ID, name, nest, ir) nest,
#include "mesh_axes.def"
  };
  for (int i = 0; i < n; i++) {
    int j = i;
    for (; j > 0 && nest[order[j - 1]] > nest[i]; j--) order[j] = order[j - 1];
    order[j] = i;
  }
}

/* The number of ranks of a mesh of the first n axes: the product of their sizes. */
static inline int64_t mesh_product(const int *size, int n) {
  int64_t r = 1;
  for (int a = 0; a < n; a++) r *= size[a];
  return r;
}

/* The rank at coordinates coord of the first n axes of sizes size. */
static inline int mesh_rank_of(const int *size, const int *coord, int n) {
  int order[MESH_NAXES], r = 0;
  mesh_order(n, order);
  for (int i = 0; i < n; i++) r = r * size[order[i]] + coord[order[i]];
  return r;
}

/* The coordinates of rank on the first n axes of sizes size. */
static inline void mesh_coords(const int *size, int rank, int *coord, int n) {
  int order[MESH_NAXES];
  mesh_order(n, order);
  for (int i = n - 1; i >= 0; i--) {
    coord[order[i]] = rank % size[order[i]];
    rank /= size[order[i]];
  }
}
#endif
