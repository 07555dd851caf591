/* User-mode-only faults from C. The runner sets UMIO_UFFD_MODE=full (and
   runs as root): the getter reports full mode until umio_config_set_uffd_mode
   asks for user-mode-only; then a system call given a non-resident mapped
   page fails with EFAULT, and works once the page is pinned (and, for the
   kernel to write into it, dirtied). Loads and stores work as ever. */
#include <sys/mman.h>

#include <umap/umap.h>
#include <umio.h>

#include "check.h"

#define PAGE 4096
#define PAGES 16

int main(void) {
  CHECK(umio_user_mode_only() == 0);
  errno = 0;
  CHECK(umio_config_set_uffd_mode("sometimes") == -1 && errno == EINVAL);
  CHECK(umio_config_set_uffd_mode(NULL) == -1 && errno == EINVAL);
  CHECK(umio_config_set_uffd_mode("USER") == 0);
  CHECK(umio_user_mode_only() == 1);
  CHECK(umio_config_set_page_size(PAGE) == 0);
  CHECK(umio_config_set_cache_bytes(64 * PAGE) == 0);
  CHECK(umio_config_set_read_ahead(0) == 0);

  char path[4096], src_path[4096], out_path[4096];
  int fd = make_file(path, PAGES * PAGE, O_RDWR);
  int src = make_file(src_path, PAGE, O_RDWR);
  CHECK(pwrite(src, "from the kernel", 15, 0) == 15);
  int out = make_file(out_path, 0, O_RDWR);
  unsigned char *p = umap(NULL, PAGES * PAGE, PROT_READ | PROT_WRITE, UMAP_PRIVATE, fd, 0);
  CHECK(p != UMAP_FAILED);
  CHECK(umio_user_mode_only() == 1);
  errno = 0;
  CHECK(umio_config_set_uffd_mode("full") == -1 && errno == EBUSY);

  /* Loads and stores. */
  CHECK(p[0] == pattern(0) && p[PAGE + 7] == pattern(PAGE + 7));
  p[2 * PAGE] = 'x';

  /* write(2) from, and read(2) into, pages never touched. */
  errno = 0;
  CHECK(pwrite(out, p + 4 * PAGE, PAGE, 0) == -1 && errno == EFAULT);
  errno = 0;
  CHECK(pread(src, p + 5 * PAGE, PAGE, 0) == -1 && errno == EFAULT);

  /* Pinned: the kernel reads it; it writes it once a store dirtied it. */
  CHECK(umio_pin(p + 4 * PAGE, 2 * PAGE) == 0);
  CHECK(pwrite(out, p + 4 * PAGE, PAGE, 0) == PAGE);
  unsigned char back[PAGE];
  pread_all(out, back, PAGE, 0);
  for (int i = 0; i < PAGE; i++) CHECK(back[i] == pattern(4 * PAGE + i));
  errno = 0;
  CHECK(pread(src, p + 5 * PAGE, PAGE, 0) == -1 && errno == EFAULT);
  p[5 * PAGE] = 0;
  CHECK(pread(src, p + 5 * PAGE, PAGE, 0) == PAGE);
  CHECK(memcmp(p + 5 * PAGE, "from the kernel", 15) == 0);
  CHECK(umio_unpin(p + 4 * PAGE, 2 * PAGE) == 0);

  CHECK(uunmap(p, PAGES * PAGE) == 0);
  unsigned char c[16];
  pread_all(fd, c, 15, 5 * PAGE);
  CHECK(memcmp(c, "from the kernel", 15) == 0);
  pread_all(fd, c, 1, 2 * PAGE);
  CHECK(c[0] == 'x');
  printf("user_mode_only: EFAULT on non-resident pages, pinned and dirtied pages work\n");
  close(fd);
  close(src);
  close(out);
  unlink(path);
  unlink(src_path);
  unlink(out_path);
  return 0;
}
