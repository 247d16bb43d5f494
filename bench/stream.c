/* A STREAM-like kernel for bench/machine.py: the best of 5 passes of a read (sum of one array)
 * and a triad (a = b + s * c) over arrays of argv[1] MiB each, at OMP_NUM_THREADS threads.
 * Prints "read GB/s" and "triad GB/s" (triad counts 3 arrays: 2 read, 1 written). Compiled by
 * the benchmark with -O3 -march=native -fopenmp. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

static double Now(void) { return omp_get_wtime(); }

int main(int argc, char** argv) {
  size_t mib = argc > 1 ? (size_t)atol(argv[1]) : 256;
  size_t n = mib * 1024 * 1024 / sizeof(float);
  float* a = aligned_alloc(64, n * sizeof(float));
  float* b = aligned_alloc(64, n * sizeof(float));
  float* c = aligned_alloc(64, n * sizeof(float));
  if (!a || !b || !c) return 1;
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) {
    a[i] = 0.f;
    b[i] = 1.f;
    c[i] = 2.f;
  } /* first touch */
  double best_read = 1e30, best_triad = 1e30;
  volatile float sink = 0.f;
  for (int rep = 0; rep < 5; ++rep) {
    double t = Now();
    float sum = 0.f;
#pragma omp parallel for simd schedule(static) reduction(+ : sum)
    for (size_t i = 0; i < n; ++i) sum += b[i];
    t = Now() - t;
    sink += sum;
    if (t < best_read) best_read = t;
    t = Now();
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; ++i) a[i] = b[i] + 3.f * c[i];
    t = Now() - t;
    if (t < best_triad) best_triad = t;
  }
  double bytes = (double)n * sizeof(float);
  printf("read %.3f\ntriad %.3f\n", bytes / best_read / 1e9, 3 * bytes / best_triad / 1e9);
  free(a);
  free(b);
  free(c);
  return sink == 12345.f; /* keeps the sum alive */
}
