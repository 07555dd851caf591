/* UMAP_BUFSIZE below the smallest cache umio takes (the runner sets it,
   with UMAP_PAGESIZE): the getters report it, the first umap and umio_map
   fail with EINVAL (the reason is on stderr), and with the minimum of 4
   pages umap works. */
#include <umap/umap.h>
#include <umio.h>

#include "check.h"

int main(void) {
  const char *bufsize = getenv("UMAP_BUFSIZE");
  CHECK(bufsize != NULL);
  CHECK(umapcfg_get_max_pages_in_buffer() == strtoull(bufsize, NULL, 10));
  uint64_t page = umapcfg_get_umap_page_size();
  char path[4096];
  size_t len = 16 * page;
  int fd = make_file(path, len, O_RDWR);
  errno = 0;
  CHECK(umap(NULL, len, PROT_READ, UMAP_PRIVATE, fd, 0) == UMAP_FAILED && errno == EINVAL);
  errno = 0;
  CHECK(umio_map(NULL, len, PROT_READ, MAP_SHARED, fd, 0, NULL) == UMIO_FAILED && errno == EINVAL);

  setenv("UMAP_BUFSIZE", "4", 1);
  unsigned char *p = umap(NULL, len, PROT_READ, UMAP_PRIVATE, fd, 0);
  CHECK(p != UMAP_FAILED);
  for (size_t off = 0; off < len; off += 1000) CHECK(p[off] == pattern(off));
  CHECK(umapcfg_get_max_pages_in_buffer() == 4);
  CHECK(uunmap(p, len) == 0);
  printf("config_small_cache: ok\n");
  close(fd);
  unlink(path);
  return 0;
}
