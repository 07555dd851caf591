/* UMap's rule for its numeric variables: set to 0, or to nothing, is
   unset (UMap's read_env_var returns "not set" for a value of 0). The
   runner sets every UMAP_* variable so: the first umap works with umio's
   defaults, which the getters report. UMAP_READ_AHEAD=0 keeps its meaning
   (no read-ahead), which is what it meant to UMap too; the runner sets it
   to nothing, so the default read-ahead stays. */
#include <umap/umap.h>
#include <umio.h>

#include "check.h"

int main(void) {
  CHECK(getenv("UMAP_PAGESIZE") != NULL && getenv("UMAP_BUFSIZE") != NULL);
  CHECK(umapcfg_get_umap_page_size() == 4096);
  CHECK(umapcfg_get_num_evictors() == 1);
  /* The default fillers: one more than the CPUs (1 to 4). */
  CHECK(umapcfg_get_num_fillers() >= 2 && umapcfg_get_num_fillers() <= 5);
  CHECK(umapcfg_get_evict_high_water_threshold() == 90);
  CHECK(umapcfg_get_evict_low_water_threshold() == 70);
  CHECK(umapcfg_get_max_fault_events() == 256);
  CHECK(umapcfg_get_read_ahead() == (2 << 20) / 4096);
  struct umio_config c;
  CHECK(umio_config_get(&c) == 0);
  /* The default cache: a quarter of physical memory, 64 MiB to 4 GiB. */
  CHECK(c.cache_bytes >= (64ull << 20) && c.cache_bytes <= (4ull << 30));
  CHECK(umapcfg_get_max_pages_in_buffer() == c.cache_bytes / 4096);

  char path[4096];
  const size_t len = 1 << 20;
  int fd = make_file(path, len, O_RDWR);
  unsigned char *p = umap(NULL, len, PROT_READ, UMAP_PRIVATE, fd, 0);
  CHECK(p != UMAP_FAILED);
  CHECK(p[12345] == pattern(12345) && p[len - 1] == pattern(len - 1));
  CHECK(umio_config_get(&c) == 0 && c.running == 1 && c.page_size == 4096);
  CHECK(uunmap(p, len) == 0);
  printf("config_zero_env: UMAP_* set to 0 or nothing: umio's defaults, a working map\n");
  close(fd);
  unlink(path);
  return 0;
}
