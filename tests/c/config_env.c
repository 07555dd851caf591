/* Configuration through the environment (set by the test runner:
   UMAP_PAGESIZE=16384 UMAP_BUFSIZE=64 UMAP_PAGE_FILLERS=3
   UMAP_PAGE_EVICTORS=2 UMAP_EVICT_HIGH_WATER_THRESHOLD=80
   UMAP_EVICT_LOW_WATER_THRESHOLD=50 UMAP_MAX_FAULT_EVENTS=128
   UMAP_READ_AHEAD=0 UMIO_EVICTION=LRU) and the setters, which override
   it before the first mapping and fail with EBUSY after it. */
#include <umap/umap.h>
#include <umio.h>

#include "check.h"

int main(void) {
  /* Before the first mapping the getters report what it would use. */
  CHECK(umapcfg_get_umap_page_size() == 16384);
  CHECK(umapcfg_get_max_pages_in_buffer() == 64);
  CHECK(umapcfg_get_num_fillers() == 3);
  CHECK(umapcfg_get_num_evictors() == 2);
  CHECK(umapcfg_get_evict_high_water_threshold() == 80);
  CHECK(umapcfg_get_evict_low_water_threshold() == 50);
  CHECK(umapcfg_get_max_fault_events() == 128);
  CHECK(umapcfg_get_read_ahead() == 0);
  CHECK(umapcfg_get_system_page_size() == sysconf(_SC_PAGESIZE));
  struct umio_config c;
  CHECK(umio_config_get(&c) == 0);
  CHECK(c.running == 0 && strcmp(c.eviction, "lru") == 0 && c.cache_bytes == 64 * 16384);

  /* A setter wins over the environment. */
  CHECK(umio_config_set_fillers(2) == 0);
  CHECK(umio_config_set_watermarks(85, 60) == 0);
  CHECK(umapcfg_get_num_fillers() == 2);
  CHECK(umapcfg_get_evict_high_water_threshold() == 85);
  CHECK(umapcfg_get_evict_low_water_threshold() == 60);

  /* The first mapping starts the runtime with these settings. */
  char path[4096];
  const size_t len = 4 << 20; /* 4x the 1 MiB cache */
  int fd = make_file(path, len, O_RDWR);
  /* As UMap programs do: round the length up to the page size. */
  uint64_t psize = umapcfg_get_umap_page_size();
  size_t mlen = (len + psize - 1) / psize * psize;
  unsigned char *p = umap(NULL, mlen, PROT_READ, UMAP_PRIVATE, fd, 0);
  CHECK(p != UMAP_FAILED);
  CHECK(umio_config_get(&c) == 0 && c.running == 1 && c.page_size == 16384);

  /* The page size and the cache bound are in force. */
  CHECK(p[5] == pattern(5));
  struct umio_stats st = {.size = sizeof st};
  CHECK(umio_stats(p, &st) == 0);
  CHECK(st.fills == 1 && st.bytes_read == 16384); /* one 16 KiB page, no read-ahead */
  unsigned long sum = 0;
  for (size_t i = 0; i < len; i += 4096) sum += p[i];
  CHECK(umio_stats(p, &st) == 0);
  printf("config_env: scan of 4 MiB: %llu fills, %llu evictions\n",
         (unsigned long long)st.fills, (unsigned long long)st.evictions);
  /* Every 16 KiB page read at least once, at most 64 of them kept. */
  CHECK(st.fills >= len / 16384 && st.bytes_read == st.fills * 16384);
  CHECK(st.evictions + 64 >= st.fills);

  /* After the first mapping the setters fail and nothing changes. */
  errno = 0;
  CHECK(umio_config_set_fillers(4) == -1 && errno == EBUSY);
  CHECK(umio_config_set_page_size(8192) == -1 && errno == EBUSY);
  CHECK(umio_config_set_cache_bytes(1 << 30) == -1 && errno == EBUSY);
  CHECK(umio_config_set_read_ahead(0) == -1 && errno == EBUSY);
  CHECK(umapcfg_get_num_fillers() == 2 && umapcfg_get_max_pages_in_buffer() == 64);
  /* Nor does the environment, read once. */
  setenv("UMAP_PAGESIZE", "8192", 1);
  CHECK(umapcfg_get_umap_page_size() == 16384);

  /* Per-region options: a prefetch policy by name; the runtime's eviction. */
  struct umio_map_options o = {.size = sizeof o};
  o.prefetch = "stride";
  o.eviction = "lru";
  unsigned char *q = umio_map(NULL, 0, PROT_READ, MAP_SHARED, fd, 0, &o);
  CHECK(q != UMIO_FAILED && q[len - 1] == pattern(len - 1));
  o.eviction = "2q";
  errno = 0;
  CHECK(umio_map(NULL, 0, PROT_READ, MAP_SHARED, fd, 0, &o) == UMIO_FAILED && errno == EOPNOTSUPP);
  CHECK(umio_unmap(q, len) == 0);

  CHECK(uunmap(p, mlen) == 0);
  printf("config_env: environment, setters and EBUSY checked (sum %lu)\n", sum);
  close(fd);
  unlink(path);
  return 0;
}
