/* The cache bound changes while the runtime runs: umio_set_cache_bytes
   shrinks it (the resident pages of a mapping, counted with mincore, go
   down to the new bound within a second) and grows it back; bad bounds
   fail with EINVAL or EBUSY and change nothing. */
#include <sys/mman.h>
#include <time.h>

#include <umap/umap.h>
#include <umio.h>

#include "check.h"

#define MIB (1u << 20)

static size_t resident(const void *p, size_t len) {
  static unsigned char vec[(64u << 20) / 4096];
  CHECK(mincore((void *)p, len, vec) == 0);
  size_t n = 0;
  for (size_t i = 0; i < len / 4096; i++) n += vec[i] & 1;
  return n * 4096;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(void) {
  char path[4096];
  const size_t len = 64 * MIB;
  CHECK(umio_config_set_page_size(64 << 10) == 0);
  CHECK(umio_config_set_cache_bytes(48 * MIB) == 0);
  int fd = make_file(path, len, O_RDWR);
  const unsigned char *p = umap(NULL, len, PROT_READ, UMAP_PRIVATE, fd, 0);
  CHECK(p != UMAP_FAILED);
  for (size_t i = 0; i < 40 * MIB; i += 4096) CHECK(p[i] == pattern(i));
  CHECK(resident(p, len) > 24 * MIB);

  CHECK(umio_set_cache_bytes(8 * MIB) == 0);
  struct umio_config c;
  CHECK(umio_config_get(&c) == 0 && c.cache_bytes == 8 * MIB && c.running == 1);
  /* The evictors shrink the cache in the background: wait for them (a
     minute at most: a hang detector, not a speed check). */
  double start = now();
  while (resident(p, len) > 8 * MIB) {
    CHECK(now() - start < 60.0);
    usleep(5000);
  }
  /* Still served, within the new bound. */
  for (size_t i = 0; i < len; i += 4096) CHECK(p[i] == pattern(i));
  CHECK(resident(p, len) <= 8 * MIB);

  /* Bad bounds change nothing. */
  errno = 0;
  CHECK(umio_set_cache_bytes(0) == -1 && errno == EINVAL);
  errno = 0;
  CHECK(umio_set_cache_bytes(3 * (64 << 10)) == -1 && errno == EINVAL);
  errno = 0;
  CHECK(umio_config_set_cache_auto(0.5) == -1 && errno == EBUSY);
  errno = 0;
  CHECK(umio_config_set_cache_auto(1.5) == -1 && errno == EINVAL);
  CHECK(umio_config_get(&c) == 0 && c.cache_bytes == 8 * MIB);

  /* Grown back: the cache holds more again. */
  CHECK(umio_set_cache_bytes(48 * MIB) == 0);
  for (size_t i = 0; i < 40 * MIB; i += 4096) CHECK(p[i] == pattern(i));
  CHECK(resident(p, len) > 24 * MIB);

  CHECK(uunmap((void *)p, len) == 0);
  close(fd);
  unlink(path);
  printf("cache_resize: ok\n");
  return 0;
}
