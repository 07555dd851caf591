/* Writing a file one also maps: umio_pwrite shows in a read-only mapping at
   once and reaches the file; umio_write_back makes the mapping's writes
   visible to pread; umio_invalidate makes a pwrite of one's own visible in
   the mapping; bad arguments fail with EINVAL or EACCES. */
#include <sys/mman.h>

#include <umap/umap.h>
#include <umio.h>

#include "check.h"

#define PAGE (64u << 10)

int main(void) {
  char path[4096];
  const size_t len = 8 * PAGE;
  CHECK(umio_config_set_page_size(PAGE) == 0);
  int fd = make_file(path, len, O_RDWR);

  /* A read-only mapping over a read-write file (LMDB's default mode). */
  const unsigned char *p = umap(NULL, len, PROT_READ, UMAP_PRIVATE, fd, 0);
  CHECK(p != UMAP_FAILED);
  CHECK(p[PAGE + 100] == pattern(PAGE + 100)); /* resident */
  CHECK(umio_pwrite((void *)(p + PAGE + 100), "new bytes", 9) == 0);
  CHECK(memcmp(p + PAGE + 100, "new bytes", 9) == 0);
  CHECK(p[PAGE + 99] == pattern(PAGE + 99) && p[PAGE + 109] == pattern(PAGE + 109));
  char buf[16] = {0};
  pread_all(fd, buf, 9, PAGE + 100);
  CHECK(memcmp(buf, "new bytes", 9) == 0);

  /* A pwrite of one's own, then umio_invalidate. */
  CHECK(p[3 * PAGE] == pattern(3 * PAGE));
  CHECK(pwrite(fd, "theirs", 6, 3 * PAGE) == 6);
  CHECK(umio_invalidate(p + 3 * PAGE, 6) == 0);
  CHECK(memcmp(p + 3 * PAGE, "theirs", 6) == 0);
  CHECK(uunmap((void *)p, len) == 0);

  /* A writable mapping: umio_write_back, then pread sees the bytes. */
  unsigned char *w = umap(NULL, len, PROT_READ | PROT_WRITE, UMAP_PRIVATE, fd, 0);
  CHECK(w != UMAP_FAILED);
  memcpy(w + 5 * PAGE + 7, "through the map", 15);
  CHECK(umio_write_back(w + 5 * PAGE, PAGE) == 0);
  pread_all(fd, buf, 15, 5 * PAGE + 7);
  CHECK(memcmp(buf, "through the map", 15) == 0);

  /* Bad arguments. */
  errno = 0;
  CHECK(umio_pwrite(w, NULL, 4) == -1 && errno == EINVAL);
  errno = 0;
  CHECK(umio_pwrite(w, "x", 0) == -1 && errno == EINVAL);
  errno = 0;
  CHECK(umio_pwrite(w + len - 1, "xy", 2) == -1 && errno == EINVAL);
  errno = 0;
  CHECK(umio_pwrite(buf, "x", 1) == -1 && errno == EINVAL);
  errno = 0;
  CHECK(umio_invalidate(buf, 1) == -1 && errno == EINVAL);
  errno = 0;
  CHECK(umio_write_back(buf, 1) == -1 && errno == EINVAL);
  CHECK(uunmap(w, len) == 0);

  /* A read-only file: EACCES, nothing written. */
  int ro = open(path, O_RDONLY);
  CHECK(ro >= 0);
  const unsigned char *r = umap(NULL, len, PROT_READ, UMAP_PRIVATE, ro, 0);
  CHECK(r != UMAP_FAILED);
  errno = 0;
  CHECK(umio_pwrite((void *)r, "x", 1) == -1 && errno == EACCES);
  CHECK(r[0] == pattern(0));
  CHECK(uunmap((void *)r, len) == 0);

  close(ro);
  close(fd);
  unlink(path);
  printf("coherence: ok\n");
  return 0;
}
