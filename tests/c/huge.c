/* Huge pages from C: a separate cache pool for huge pages; a promotion
   policy written in C is asked after faults and the ranges it picks
   become huge pages (AnonHugePages grows); the built-in policies by name;
   hugetlbfs options, with the pool empty, fail with ENOMEM or fall back
   as asked; bad values fail with EINVAL. */
#include <stdatomic.h>
#include <sys/mman.h>

#include <umio.h>

#include "check.h"

#define LEN ((size_t)8 << 20)

static atomic_int asked, released;

static int promote_first_range(void *user, const struct umio_fault *f) {
  (void)user;
  atomic_fetch_add(&asked, 1);
  return f->kind == UMIO_FAULT_MISS && f->page < 512;
}

static void release(void *user) {
  (void)user;
  atomic_fetch_add(&released, 1);
}

static long anon_huge_kb(void) {
  FILE *f = fopen("/proc/self/smaps_rollup", "r");
  CHECK(f != NULL);
  char line[256];
  long kb = -1;
  while (fgets(line, sizeof line, f))
    if (strncmp(line, "AnonHugePages:", 14) == 0) kb = atol(line + 14);
  fclose(f);
  return kb;
}

static long free_huge_pages(void) {
  FILE *f = fopen("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages", "r");
  if (f == NULL) return 0;
  long n = 0;
  if (fscanf(f, "%ld", &n) != 1) n = 0;
  fclose(f);
  return n;
}

int main(void) {
  CHECK(umio_config_set_cache_bytes(64 << 20) == 0);
  /* A separate pool for huge pages: at least four of them. */
  errno = 0;
  CHECK(umio_config_set_huge_cache_bytes(2 << 20) == -1 && errno == EINVAL);
  CHECK(umio_config_set_huge_cache_bytes(16 << 20) == 0);
  struct umio_config cfg;
  CHECK(umio_config_get(&cfg) == 0 && cfg.huge_cache_bytes == 16 << 20);
  char path[4096];
  int fd = make_file(path, LEN, O_RDWR);

  struct umio_promote_ops ops = {promote_first_range, release, NULL};
  struct umio_map_options o = {.size = sizeof o};
  o.page_size = 4096;
  o.prefetch = "none";
  o.promoter = &ops;
  long before = anon_huge_kb();
  unsigned char *p = umio_map(NULL, LEN, PROT_READ, MAP_SHARED, fd, 0, &o);
  CHECK(p != MAP_FAILED);
  for (size_t i = 0; i < LEN; i += 4096) CHECK(p[i] == pattern(i));
  /* Every fault outside the first range (which promotion fills) asks. */
  CHECK(atomic_load(&asked) >= 1536);
  /* Promotion runs in the background: wait for it. On a machine whose
     memory is fragmented the kernel may have no huge page for it
     (MADV_COLLAPSE fails with ENOMEM): then compact, page the range out
     and touch it again, which asks the policy again (five tries, a minute
     each at most: a hang detector, not a speed check). */
  for (int attempt = 0; anon_huge_kb() < before + 2048; attempt++) {
    CHECK(attempt < 5);
    for (int waited = 0; anon_huge_kb() < before + 2048 && waited < 6000; waited++)
      usleep(10000);
    if (anon_huge_kb() >= before + 2048) break;
    FILE *compact = fopen("/proc/sys/vm/compact_memory", "w");
    if (compact != NULL) {
      fputs("1", compact);
      fclose(compact);
    }
    CHECK(umio_advise(p, 2 << 20, UMIO_ADVICE_COLD) == 0);
    for (size_t i = 0; i < (2 << 20); i += 4096) CHECK(p[i] == pattern(i));
  }
  CHECK(anon_huge_kb() >= before + 2048);
  for (size_t i = 0; i < LEN; i += 511) CHECK(p[i] == pattern(i));
  CHECK(umio_unmap(p, LEN) == 0);
  /* The policy's user is released at unmap, possibly on another thread a
     moment later. */
  WAIT_UNTIL(atomic_load(&released) != 0);
  CHECK(atomic_load(&released) == 1);

  /* 2 MiB pages live in the huge-page pool: a file three times that pool
     reads back whole, and the pool stays within its bound. */
  {
    size_t big = 48 << 20;
    char big_path[4096];
    int big_fd = make_file(big_path, big, O_RDONLY);
    struct umio_map_options two = {.size = sizeof two};
    two.page_size = 2 << 20;
    two.prefetch = "none";
    unsigned char *q = umio_map(NULL, big, PROT_READ, MAP_SHARED, big_fd, 0, &two);
    CHECK(q != MAP_FAILED);
    for (size_t i = 0; i < big; i += 4096) CHECK(q[i] == pattern(i));
    struct umio_stats st = {.size = sizeof st};
    CHECK(umio_stats(q, &st) == 0);
    /* 24 huge pages through a pool of 8: at least 16 evicted (the 64 MiB
       regular pool alone would have held them all). */
    CHECK(st.evictions >= 16);
    CHECK(umio_unmap(q, big) == 0);
    close(big_fd);
    unlink(big_path);
  }

  struct umio_map_options named = {.size = sizeof named};
  named.page_size = 4096;
  named.promote = "sequential";
  p = umio_map(NULL, LEN, PROT_READ, MAP_SHARED, fd, 0, &named);
  CHECK(p != MAP_FAILED);
  for (size_t i = 0; i < LEN; i += 4096) CHECK(p[i] == pattern(i));
  CHECK(umio_unmap(p, LEN) == 0);

  struct umio_map_options bad = {.size = sizeof bad};
  bad.promote = "often";
  errno = 0;
  CHECK(umio_map(NULL, LEN, PROT_READ, MAP_SHARED, fd, 0, &bad) == MAP_FAILED && errno == EINVAL);
  bad.promote = "always";
  bad.promoter = &ops; /* both: EINVAL, and the ops are released */
  errno = 0;
  CHECK(umio_map(NULL, LEN, PROT_READ, MAP_SHARED, fd, 0, &bad) == MAP_FAILED && errno == EINVAL);
  CHECK(atomic_load(&released) == 2);
  struct umio_map_options huge = {.size = sizeof huge};
  huge.hugetlb = 7;
  errno = 0;
  CHECK(umio_map(NULL, LEN, PROT_READ, MAP_SHARED, fd, 0, &huge) == MAP_FAILED && errno == EINVAL);

  lock_hugetlb_pool();
  if (free_huge_pages() == 0) {
    huge.hugetlb = UMIO_HUGETLB_REQUIRE;
    errno = 0;
    CHECK(umio_map(NULL, LEN, PROT_READ, MAP_SHARED, fd, 0, &huge) == MAP_FAILED && errno == ENOMEM);
    huge.hugetlb = UMIO_HUGETLB_FALLBACK;
    p = umio_map(NULL, LEN, PROT_READ, MAP_SHARED, fd, 0, &huge);
    CHECK(p != MAP_FAILED);
    for (size_t i = 0; i < LEN; i += 4096) CHECK(p[i] == pattern(i));
    CHECK(umio_unmap(p, LEN) == 0);
  }
  close(fd);
  unlink(path);
  printf("huge: promotion policy in C, names, hugetlbfs options\n");
  return 0;
}
