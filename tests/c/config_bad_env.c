/* A malformed UMAP_* variable (the runner sets UMAP_PAGESIZE=1000) fails
   the first umap with EINVAL, prints nothing, and is not remembered: once
   the environment is fixed, umap works. */
#include <umap/umap.h>
#include <umio.h>

#include "check.h"

int main(void) {
  errno = 0;
  CHECK(umapcfg_get_umap_page_size() == 0 && errno == EINVAL);
  struct umio_config c;
  CHECK(umio_config_get(&c) == -1 && errno == EINVAL);

  char path[4096];
  int fd = make_file(path, 1 << 20, O_RDWR);
  errno = 0;
  CHECK(umap(NULL, 1 << 20, PROT_READ, UMAP_PRIVATE, fd, 0) == UMAP_FAILED && errno == EINVAL);

  setenv("UMAP_PAGESIZE", "8192", 1);
  unsigned char *p = umap(NULL, 1 << 20, PROT_READ, UMAP_PRIVATE, fd, 0);
  CHECK(p != UMAP_FAILED);
  CHECK(p[12345] == pattern(12345));
  CHECK(umapcfg_get_umap_page_size() == 8192);
  CHECK(uunmap(p, 1 << 20) == 0);
  printf("config_bad_env: EINVAL, then a working map once the variable is fixed\n");
  close(fd);
  unlink(path);
  return 0;
}
