/* A stalled file system for one rank, preloaded into a job by tests/mpi/run_hang_matrix.sh: a
 * read (pread, pread64, read) of the file DISCO_TEST_STALL_PATH by the rank DISCO_TEST_STALL_RANK
 * (OMPI_COMM_WORLD_RANK or PMI_RANK) never returns, as on an NFS server that went away. Every
 * other read, and every other process the preload reaches (the launcher), is passed through. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

static int Stalls(int fd) {
  const char* want = getenv("DISCO_TEST_STALL_PATH");
  const char* rank = getenv("DISCO_TEST_STALL_RANK");
  const char* mine = getenv("OMPI_COMM_WORLD_RANK");
  if (mine == NULL) mine = getenv("PMI_RANK");
  if (want == NULL || rank == NULL || mine == NULL || strcmp(rank, mine) != 0) return 0;
  char link[64], path[PATH_MAX];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, path, sizeof path - 1);
  if (n <= 0) return 0;
  path[n] = '\0';
  return strcmp(path, want) == 0;
}

static void Stall(void) {
  for (;;) sleep(60);
}

ssize_t pread(int fd, void* buf, size_t count, off_t offset) {
  static ssize_t (*real)(int, void*, size_t, off_t) = NULL;
  if (real == NULL) real = (ssize_t(*)(int, void*, size_t, off_t))dlsym(RTLD_NEXT, "pread");
  if (Stalls(fd)) Stall();
  return real(fd, buf, count, offset);
}

ssize_t pread64(int fd, void* buf, size_t count, off_t offset) {
  static ssize_t (*real)(int, void*, size_t, off_t) = NULL;
  if (real == NULL) real = (ssize_t(*)(int, void*, size_t, off_t))dlsym(RTLD_NEXT, "pread64");
  if (Stalls(fd)) Stall();
  return real(fd, buf, count, offset);
}

ssize_t read(int fd, void* buf, size_t count) {
  static ssize_t (*real)(int, void*, size_t) = NULL;
  if (real == NULL) real = (ssize_t(*)(int, void*, size_t))dlsym(RTLD_NEXT, "read");
  if (Stalls(fd)) Stall();
  return real(fd, buf, count);
}
