/* mpi_fail.c: how a trainer fails on a communication error, driven by
 * tests/mpi_tests.sh, which checks the messages and that the job ends.
 *
 *   mpi_fail mismatch   mesh tp=2 x dp=2 on whatever mpirun started: prints
 *                       the world-size message, exits 3
 *   mpi_fail dead       the last rank kills itself (SIGKILL) while the
 *                       others all-reduce: mpirun must end the job
 *   mpi_fail hang       the last rank sleeps instead of joining; the others
 *                       have a 1 s timeout, print the error (naming the
 *                       rank that did not arrive) and abort
 *   mpi_fail astray     the last rank waits in a barrier while the others
 *                       all-reduce: the watchdog says where it waits
 *   mpi_fail bucket     the others start an overlapped gradient bucket
 *                       (non-blocking) and wait for it with a 1 s timeout
 *                       while the last rank sleeps: the wait names it
 *
 * What the trainer does on an error, here as everywhere: print m.err with
 * the rank on stderr, then mmrt_comm_abort().
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "mmrt_comm.h"

/* mmrt_mesh_init on dp x cp x tp x pp (any other axis of size 1). */
static int mesh_init4(MmrtMesh *m, int dp, int cp, int tp, int pp, char *err, size_t n) {
  int size[MESH_NAXES];
  for (int a = 0; a < MESH_NAXES; a++) size[a] = 1;
  size[MMRT_AXIS_DP] = dp, size[MMRT_AXIS_CP] = cp, size[MMRT_AXIS_TP] = tp,
  size[MMRT_AXIS_PP] = pp;
  return mmrt_mesh_init(m, size, err, n);
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  MmrtMesh m;
  char err[256];
  if (strcmp(mode, "mismatch") == 0) {
    int rc = mesh_init4(&m, 2, 1, 2, 1, err, sizeof err);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rc != MMRT_OK) {
      fprintf(stderr, "rank %d: error: %s\n", rank, err);
      mmrt_comm_finalize();
      return 3;
    }
    mmrt_mesh_free(&m);
    mmrt_comm_finalize();
    return 0;
  }
  int probe = mesh_init4(&m, 1, 1, 1, 1, err, sizeof err);
  if (probe == MMRT_OK) mmrt_mesh_free(&m);
  int world;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (mesh_init4(&m, world, 1, 1, 1, err, sizeof err) != MMRT_OK) {
    fprintf(stderr, "error: %s\n", err);
    mmrt_comm_abort(1);
  }
  int rank = m.coord[MMRT_AXIS_WORLD];
  float x[1024] = {0};
  if (strcmp(mode, "dead") == 0) {
    if (mmrt_barrier(&m, MMRT_AXIS_DP) != MMRT_OK) {
      fprintf(stderr, "rank %d: error: %s\n", rank, m.err);
      mmrt_comm_abort(1);
    }
    if (rank == world - 1) raise(SIGKILL);
    for (int step = 0; step < 1000000; step++)
      if (mmrt_all_reduce(&m, MMRT_AXIS_DP, x, x, 1024, MMRT_F32) != MMRT_OK) {
        fprintf(stderr, "rank %d: error: %s\n", rank, m.err);
        mmrt_comm_abort(1);
      }
    fprintf(stderr, "rank %d: the all-reduces finished without the dead rank\n", rank);
  } else if (strcmp(mode, "hang") == 0) {
    mmrt_comm_set_timeout(&m, 1.0);
    if (rank == world - 1) {
      sleep(30); /* mpirun kills it once another rank aborts */
    } else if (mmrt_all_reduce(&m, MMRT_AXIS_DP, x, x, 1024, MMRT_F32) != MMRT_OK) {
      fprintf(stderr, "rank %d: error: %s\n", rank, m.err);
      mmrt_comm_abort(2);
    }
    fprintf(stderr, "rank %d: no timeout\n", rank);
  } else if (strcmp(mode, "astray") == 0) {
    mmrt_comm_set_timeout(&m, 2.0);
    int rc = rank == world - 1 ? mmrt_barrier(&m, MMRT_AXIS_WORLD)
                               : mmrt_all_reduce(&m, MMRT_AXIS_DP, x, x, 1024, MMRT_F32);
    if (rc != MMRT_OK) {
      fprintf(stderr, "rank %d: error: %s\n", rank, m.err);
      if (rank == 0) mmrt_comm_abort(2);
      sleep(30); /* the others wait to be ended by rank 0's abort */
    }
    fprintf(stderr, "rank %d: no timeout\n", rank);
  } else if (strcmp(mode, "bucket") == 0) {
    mmrt_comm_set_timeout(&m, 1.0);
    void *bufs[2] = {x, x + 512};
    size_t counts[2] = {512, 512};
    if (rank == world - 1) {
      sleep(30); /* mpirun kills it once another rank aborts */
    } else if (mmrt_all_reduce_bucket_start(&m, MMRT_AXIS_DP, 3, bufs, counts, 2, MMRT_F32, 1) !=
                   MMRT_OK ||
               mmrt_bucket_wait(&m, 3) != MMRT_OK) {
      fprintf(stderr, "rank %d: error: %s\n", rank, m.err);
      mmrt_comm_abort(2);
    }
    fprintf(stderr, "rank %d: no timeout\n", rank);
  } else {
    fprintf(stderr, "usage: mpi_fail mismatch|dead|hang|astray|bucket\n");
  }
  mmrt_mesh_free(&m);
  mmrt_comm_finalize();
  return 4;
}
