/* Flush and uunmap durability, checked with pread; uunmap honours its
   length, leaves the rest mapped, unmaps for real, and reports a second
   uunmap; MAP_SHARED behaves as UMAP_PRIVATE. */
#include <sys/mman.h>

#include <umap/umap.h>
#include <umio.h>

#include "check.h"

#define PAGE (64u << 10)

static int mapped(const void *addr) {
  unsigned char vec[1];
  return mincore((void *)addr, 4096, vec) == 0;
}

static void file_has(int fd, off_t off, const char *s) {
  char buf[64] = {0};
  pread_all(fd, buf, strlen(s), off);
  CHECK(memcmp(buf, s, strlen(s)) == 0);
}

int main(void) {
  char path[4096];
  const size_t len = 8 * PAGE;
  CHECK(umio_config_set_page_size(PAGE) == 0);
  int fd = make_file(path, len, O_RDWR);

  /* umap_flush makes writes durable; the region stays usable. */
  char *p = umap(NULL, len, PROT_READ | PROT_WRITE, UMAP_PRIVATE, fd, 0);
  CHECK(p != UMAP_FAILED);
  memcpy(p + 10, "flushed", 7);
  memcpy(p + 5 * PAGE + 1, "also flushed", 12);
  CHECK(umap_flush() == 0);
  file_has(fd, 10, "flushed");
  file_has(fd, 5 * PAGE + 1, "also flushed");

  /* umio_flush of a range. */
  memcpy(p + 2 * PAGE, "range", 5);
  CHECK(umio_flush(p + 2 * PAGE, 5) == 0);
  file_has(fd, 2 * PAGE, "range");
  struct umio_stats st = {.size = sizeof st};
  CHECK(umio_stats(p, &st) == 0);
  CHECK(st.writebacks >= 3 && st.bytes_written >= 3 * PAGE);

  /* uunmap of the last two pages writes them back and unmaps only them. */
  memcpy(p + 6 * PAGE, "tail pages", 10);
  memcpy(p + 1 * PAGE, "head pages", 10);
  CHECK(uunmap(p + 6 * PAGE, 2 * PAGE) == 0);
  file_has(fd, 6 * PAGE, "tail pages");
  CHECK(!mapped(p + 6 * PAGE) && !mapped(p + 7 * PAGE));
  CHECK(mapped(p) && memcmp(p + 1 * PAGE, "head pages", 10) == 0);
  /* The same range again: not mapped any more. */
  errno = 0;
  CHECK(uunmap(p + 6 * PAGE, 2 * PAGE) == -1 && errno == EINVAL);
  CHECK(umio_flush(p + 6 * PAGE, 1) == -1 && errno == EINVAL);

  /* A length that is not a multiple of the page size is rounded up. */
  CHECK(uunmap(p + 4 * PAGE, PAGE + 1) == 0);
  CHECK(!mapped(p + 5 * PAGE) && mapped(p + 3 * PAGE));

  /* The rest; its dirty page reaches the file. */
  CHECK(uunmap(p, 4 * PAGE) == 0);
  file_has(fd, 1 * PAGE, "head pages");
  CHECK(!mapped(p));
  errno = 0;
  CHECK(uunmap(p, len) == -1 && errno == EINVAL);
  CHECK(umio_stats(p, &st) == -1 && errno == EINVAL);

  /* MAP_SHARED: the same; uunmap with the full length of an odd size. */
  const size_t odd = 3 * PAGE + 1000;
  p = umap(NULL, odd, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  CHECK(p != UMAP_FAILED);
  memcpy(p + odd - 6, "shared", 6);
  CHECK(uunmap(p, odd) == 0);
  file_has(fd, (off_t)odd - 6, "shared");
  CHECK(!mapped(p));

  /* A read-only region: reads the flushed bytes, cannot be flushed dirty. */
  p = umap(NULL, len, PROT_READ, UMAP_PRIVATE, fd, 0);
  CHECK(p != UMAP_FAILED);
  CHECK(memcmp(p + 10, "flushed", 7) == 0);
  CHECK(memcmp(p + 6 * PAGE, "tail pages", 10) == 0);
  CHECK(umap_flush() == 0);
  CHECK(uunmap(p, len) == 0);

  printf("durability: flush, range flush, partial and full uunmap checked with pread\n");
  close(fd);
  unlink(path);
  return 0;
}
