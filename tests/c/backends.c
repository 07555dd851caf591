/* Every backend from C: the same file mapped through pread, io_uring,
   io_uring with O_DIRECT and DAX (the file mapped shared) reads the same
   bytes, and writes reach the file after umio_flush; the file keeps its
   length. An unknown backend fails with EINVAL. */
#include <sys/mman.h>

#include <umio.h>

#include "check.h"

#define LEN ((size_t)(3 << 20) + 1000) /* not a multiple of the page size */

int main(void) {
  const char *backends[] = {"pread", "io_uring", "io_uring_direct", "dax", ""};
  for (size_t b = 0; b < sizeof backends / sizeof *backends; b++) {
    char path[4096];
    int fd = make_file(path, LEN, O_RDWR);
    struct umio_map_options o = {.size = sizeof o};
    o.backend = backends[b];
    unsigned char *p = umio_map(NULL, LEN, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0, &o);
    CHECK(p != MAP_FAILED);
    for (size_t i = 0; i < LEN; i += 511) CHECK(p[i] == pattern(i));
    CHECK(p[LEN - 1] == pattern(LEN - 1));
    memset(p + 4096, 0xAB, 3 * 4096);
    p[LEN - 1] = 0xCD;
    CHECK(umio_flush(p, 0) == 0);
    unsigned char got[3 * 4096];
    pread_all(fd, got, sizeof got, 4096);
    for (size_t i = 0; i < sizeof got; i++) CHECK(got[i] == 0xAB);
    pread_all(fd, got, 1, (off_t)LEN - 1);
    CHECK(got[0] == 0xCD);
    struct stat sb;
    CHECK(fstat(fd, &sb) == 0 && (size_t)sb.st_size == LEN);
    CHECK(umio_unmap(p, LEN) == 0);
    close(fd);
    unlink(path);
  }

  char path[4096];
  int fd = make_file(path, 8192, O_RDWR);
  struct umio_map_options o = {.size = sizeof o};
  o.backend = "nvme";
  errno = 0;
  CHECK(umio_map(NULL, 8192, PROT_READ, MAP_SHARED, fd, 0, &o) == MAP_FAILED && errno == EINVAL);
  close(fd);
  unlink(path);

  printf("backends: 5 backends read and wrote the same file\n");
  return 0;
}
