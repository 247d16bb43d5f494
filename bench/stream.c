/* A STREAM-like kernel for bench/machine.py: a read (sum of one array) and a triad
 * (a = b + s * c) over arrays of argv[1] MiB each, at OMP_NUM_THREADS threads, in 4 KiB pages, or
 * with argv[2] "huge" in 2 MiB pages (madvise(MADV_HUGEPAGE), as disco's weights: one core reads
 * about twice as fast there). Alone: the best of 5 passes of each. With argv[3] START (seconds
 * since the epoch, CLOCK_REALTIME) and argv[4] WINDOW (seconds): passes of the read from START
 * for WINDOW seconds, then of the triad for as long from START + WINDOW + 0.1, each figure the
 * bytes of its whole passes over their time: processes given the same START read side by side,
 * and their figures add up to what the cores read together (each process's best pass did not:
 * the best of one often fell while the other was still starting). Prints "read GB/s" and "triad
 * GB/s" (triad counts 3 arrays: 2 read, 1 written), "huge_mib N" (of the arrays, in huge pages)
 * and, when START had passed before the arrays were ready, "late 1".
 * Compiled by the benchmark with -O3 -march=native -fopenmp. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static double Now(void) { return omp_get_wtime(); }

static double Epoch(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Waits until the epoch time `at`; 1 when it had already passed. */
static int WaitUntil(double at) {
  if (Epoch() > at) return 1;
  while (Epoch() < at) {
  }
  return 0;
}

static float Read(const float* b, size_t n) {
  float sum = 0.f;
#pragma omp parallel for simd schedule(static) reduction(+ : sum)
  for (size_t i = 0; i < n; ++i) sum += b[i];
  return sum;
}

static void Triad(float* a, const float* b, const float* c, size_t n) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; ++i) a[i] = b[i] + 3.f * c[i];
}

/* argv[i] as a number, or exit 2 naming it. */
static double Arg(char** argv, int i, const char* what, double lo, double hi) {
  char* end = NULL;
  double v = strtod(argv[i], &end);
  if (end == argv[i] || *end != '\0' || !(v >= lo && v <= hi)) {
    fprintf(stderr, "stream: %s is a number in [%.15g, %.15g], not '%s'\n", what, lo, hi, argv[i]);
    exit(2);
  }
  return v;
}

int main(int argc, char** argv) {
  if (argc == 4 || argc > 5) {
    fprintf(stderr, "usage: stream [MIB [small|huge [START WINDOW]]]\n");
    return 2;
  }
  size_t mib = argc > 1 ? (size_t)Arg(argv, 1, "MIB", 1, 1 << 20) : 256;
  int huge = argc > 2 && strcmp(argv[2], "huge") == 0;
  if (argc > 4) { /* START within a minute of now, WINDOW up to a minute */
    Arg(argv, 3, "START", Epoch() - 60, Epoch() + 60);
    Arg(argv, 4, "WINDOW", 0.01, 60);
  }
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
  double bytes = (double)n * sizeof(float), read = 0, triad = 0;
  volatile float sink = 0.f;
  if (argc > 4) { /* side by side with other processes: whole passes within a shared window */
    double start = atof(argv[3]), window = atof(argv[4]);
    int late = WaitUntil(start);
    double t0 = Now(), t = t0;
    int passes = 0;
    for (; t - t0 < window; t = Now(), ++passes) sink += Read(b, n);
    read = passes * bytes / (t - t0);
    late |= WaitUntil(start + window + 0.1);
    t0 = t = Now();
    for (passes = 0; t - t0 < window; t = Now(), ++passes) Triad(a, b, c, n);
    triad = 3 * passes * bytes / (t - t0);
    if (late) printf("late 1\n");
  } else {
    double best_read = 1e30, best_triad = 1e30;
    for (int rep = 0; rep < 5; ++rep) {
      double t = Now();
      sink += Read(b, n);
      t = Now() - t;
      if (t < best_read) best_read = t;
      t = Now();
      Triad(a, b, c, n);
      t = Now() - t;
      if (t < best_triad) best_triad = t;
    }
    read = bytes / best_read;
    triad = 3 * bytes / best_triad;
  }
  printf("read %.3f\ntriad %.3f\n", read / 1e9, triad / 1e9);
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
