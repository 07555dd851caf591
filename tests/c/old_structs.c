/* A binary built against an older umio.h keeps working with this library:
   its struct umio_map_options and struct umio_stats are the earlier,
   smaller layouts (declared here by hand, as that header declared them),
   and umio reads and writes no byte past their `size`. A newer binary's
   larger structures work too: unknown output fields are zeroed, and `size`
   tells it what this library filled. */
#include <umio.h>

#include "check.h"

/* struct umio_map_options before backend, promote, promoter and hugetlb. */
struct old_map_options {
  size_t size;
  size_t page_size;
  const char *prefetch;
  size_t read_ahead;
  const char *eviction;
  const struct umio_store_ops *store;
  const struct umio_prefetch_ops *prefetcher;
};

/* struct umio_stats before no_progress_faults. */
struct old_stats {
  size_t size;
  uint64_t faults, hits, fills, prefetched, evictions, writebacks, bytes_read, bytes_written;
};

int main(void) {
  CHECK(umio_config_set_page_size(4096) == 0);
  char path[4096];
  const size_t len = 1 << 20;
  int fd = make_file(path, len, O_RDWR);

  /* The old options, followed in memory by bytes that would be a garbage
     backend pointer and hugetlb value were they read as the new layout. */
  struct {
    struct old_map_options o;
    unsigned char garbage[64];
  } opts;
  memset(&opts, 0, sizeof opts);
  memset(opts.garbage, 0xff, sizeof opts.garbage);
  opts.o.size = sizeof opts.o;
  opts.o.page_size = 16384;
  opts.o.prefetch = "none";
  CHECK(sizeof opts.o < sizeof(struct umio_map_options));
  unsigned char *p = umio_map(NULL, len, PROT_READ, MAP_SHARED, fd, 0,
                              (const struct umio_map_options *)&opts.o);
  CHECK(p != UMIO_FAILED);
  CHECK(p[5 * 16384 + 3] == pattern(5 * 16384 + 3));

  /* The old counters, followed by a guard umio must not write. */
  struct {
    struct old_stats s;
    unsigned char guard[64];
  } st;
  memset(&st, 0, sizeof st);
  memset(st.guard, 0xab, sizeof st.guard);
  st.s.size = sizeof st.s;
  CHECK(umio_stats(p, (struct umio_stats *)&st.s) == 0);
  CHECK(st.s.size == sizeof st.s);
  /* One fault, one fill of the old options' page size: they were read. */
  CHECK(st.s.faults == 1 && st.s.fills == 1 && st.s.bytes_read == 16384);
  for (size_t i = 0; i < sizeof st.guard; i++) CHECK(st.guard[i] == 0xab);

  /* A newer binary's counters: a field this library does not know. */
  struct {
    struct umio_stats s;
    uint64_t newer_field;
  } newer;
  memset(&newer, 0xff, sizeof newer);
  newer.s.size = sizeof newer;
  CHECK(umio_stats(p, (struct umio_stats *)&newer) == 0);
  CHECK(newer.s.size == sizeof(struct umio_stats));
  CHECK(newer.newer_field == 0 && newer.s.fills == 1 && newer.s.no_progress_faults == 0);

  CHECK(umio_unmap(p, len) == 0);
  close(fd);
  unlink(path);
  printf("old_structs: ok\n");
  return 0;
}
