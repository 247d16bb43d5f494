/* A STREAM-like kernel for bench/machine.py: the best of 5 passes of a read (sum of one array)
 * and a triad (a = b + s * c) over arrays of argv[1] MiB each, at OMP_NUM_THREADS threads, in
 * 4 KiB pages, or with argv[2] "huge" in 2 MiB pages (madvise(MADV_HUGEPAGE), as disco's
 * weights: one core reads about twice as fast there). Prints "read GB/s" and "triad GB/s"
 * (triad counts 3 arrays: 2 read, 1 written) and "huge_mib N" (of the arrays, in huge pages).
 * Compiled by the benchmark with -O3 -march=native -fopenmp. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static double Now(void) { return omp_get_wtime(); }

int main(int argc, char** argv) {
  size_t mib = argc > 1 ? (size_t)atol(argv[1]) : 256;
  int huge = argc > 2 && strcmp(argv[2], "huge") == 0;
  size_t n = mib * 1024 * 1024 / sizeof(float);
  size_t align = (size_t)2 << 20; /* whole 2 MiB pages either way */
  float* a = aligned_alloc(align, n * sizeof(float));
  float* b = aligned_alloc(align, n * sizeof(float));
  float* c = aligned_alloc(align, n * sizeof(float));
  if (!a || !b || !c) return 1;
  int advice = huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE;
  madvise(a, n * sizeof(float), advice);
  madvise(b, n * sizeof(float), advice);
  madvise(c, n * sizeof(float), advice);
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
  /* AnonHugePages of this process: whether the kernel gave the huge pages asked for. */
  FILE* f = fopen("/proc/self/smaps_rollup", "r");
  char line[256];
  long huge_kib = 0;
  while (f && fgets(line, sizeof line, f)) sscanf(line, "AnonHugePages: %ld kB", &huge_kib);
  if (f) fclose(f);
  printf("huge_mib %.1f\n", huge_kib / 1024.0);
  free(a);
  free(b);
  free(c);
  return sink == 12345.f; /* keeps the sum alive */
}
