/* A program written for UMap: rounds its length to umapcfg_get_umap_page_size(),
   prefetches with umap_prefetch, pins with umap_fetch_and_pin. Pinned pages
   survive a scan that evicts everything else, and their writes reach the
   file. */
#include <umap/umap.h>
#include <umio.h>

#include "check.h"

#define PAGES 64

int main(void) {
  CHECK(umap_has_write_support() == 1);
  CHECK(umio_config_set_page_size(65536) == 0);
  CHECK(umio_config_set_cache_bytes(16 * 65536) == 0); /* 16 pages of 64 KiB */
  CHECK(umio_config_set_read_ahead(0) == 0);
  uint64_t psize = umapcfg_get_umap_page_size();
  CHECK(psize == 65536);
  char path[4096];
  const size_t len = PAGES * psize;
  int fd = make_file(path, len, O_RDWR);
  char *base = umap(NULL, len, PROT_READ | PROT_WRITE, UMAP_PRIVATE, fd, 0);
  CHECK(base != UMAP_FAILED);

  /* Prefetch pages 10..13 in the background. */
  struct umap_prefetch_item items[4];
  for (int i = 0; i < 4; i++) items[i].page_base_addr = base + (10 + i) * psize;
  errno = 0;
  umap_prefetch(4, items);
  CHECK(errno == 0);
  struct umio_stats st = {.size = sizeof st};
  for (int i = 0; i < HANG_MS; i++) {
    CHECK(umio_stats(base, &st) == 0);
    if (st.prefetched == 4) break;
    usleep(1000);
  }
  CHECK(st.prefetched == 4 && st.fills == 4);
  for (int i = 10; i < 14; i++) CHECK((unsigned char)base[i * psize + 1] == pattern(i * psize + 1));
  CHECK(umio_stats(base, &st) == 0 && st.fills == 4); /* served from the cache */

  /* Pin pages 0..3 (a quarter of the cache) and write to them. */
  umap_fetch_and_pin(base, 4 * psize);
  CHECK(errno == 0);
  for (int i = 0; i < 4; i++) base[i * psize + 7] = (char)('p' + i);
  CHECK(umio_stats(base, &st) == 0);
  uint64_t fills_before = st.fills;

  /* A scan of the other pages evicts many times over, but not the pins. */
  unsigned long sum = 0;
  for (int round = 0; round < 2; round++)
    for (size_t i = 4 * psize; i < len; i += 4096) sum += (unsigned char)base[i];
  CHECK(umio_stats(base, &st) == 0 && st.evictions >= PAGES);
  uint64_t fills_after_scan = st.fills;
  for (int i = 0; i < 4; i++) CHECK(base[i * psize + 7] == (char)('p' + i));
  CHECK(umio_stats(base, &st) == 0 && st.fills == fills_after_scan);
  CHECK(fills_after_scan > fills_before);

  /* Pinned pages' writes are written back. */
  CHECK(umap_flush() == 0);
  for (int i = 0; i < 4; i++) {
    char c;
    pread_all(fd, &c, 1, (off_t)(i * psize + 7));
    CHECK(c == (char)('p' + i));
  }
  CHECK(umio_unpin(base, 4 * psize) == 0);
  base[3 * psize] = 'u';
  CHECK(uunmap(base, len) == 0);
  char c;
  pread_all(fd, &c, 1, (off_t)(3 * psize));
  CHECK(c == 'u');
  printf("umap_compat: prefetch, pin under eviction and write-back checked (sum %lu)\n", sum);
  close(fd);
  unlink(path);
  return 0;
}
