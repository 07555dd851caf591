/* A malformed UMIO_* or UMAP_* variable (the runner sets one, and names it
   in BAD_VAR; UMAP_PAGESIZE when BAD_VAR is unset) fails the first umap
   with EINVAL, prints nothing, and is not remembered: once the variable
   is removed, umap works. */
#include <umap/umap.h>
#include <umio.h>

#include "check.h"

int main(void) {
  const char *bad = getenv("BAD_VAR");
  if (!bad || !*bad) bad = "UMAP_PAGESIZE";
  CHECK(getenv(bad) != NULL);
  errno = 0;
  CHECK(umapcfg_get_umap_page_size() == 0 && errno == EINVAL);
  struct umio_config c;
  errno = 0;
  CHECK(umio_config_get(&c) == -1 && errno == EINVAL);
  errno = 0;
  CHECK(umio_user_mode_only() == -1 && errno == EINVAL);

  char path[4096];
  int fd = make_file(path, 1 << 20, O_RDWR);
  errno = 0;
  CHECK(umap(NULL, 1 << 20, PROT_READ, UMAP_PRIVATE, fd, 0) == UMAP_FAILED && errno == EINVAL);
  errno = 0;
  CHECK(umio_map(NULL, 1 << 20, PROT_READ, MAP_SHARED, fd, 0, NULL) == UMIO_FAILED && errno == EINVAL);

  unsetenv(bad);
  setenv("UMAP_PAGESIZE", "8192", 1);
  unsigned char *p = umap(NULL, 1 << 20, PROT_READ, UMAP_PRIVATE, fd, 0);
  CHECK(p != UMAP_FAILED);
  CHECK(p[12345] == pattern(12345));
  CHECK(umapcfg_get_umap_page_size() == 8192);
  CHECK(uunmap(p, 1 << 20) == 0);
  printf("config_bad_env: %s: EINVAL, then a working map once the variable is fixed\n", bad);
  close(fd);
  unlink(path);
  return 0;
}
