/* Faults served in the faulting thread: umio_config_set_fault_service
   takes "in-thread" (and refuses other names with EINVAL), every fault is
   then served in the thread (umio_runtime_stats.in_thread_faults), a
   non-resident mapped buffer passed to write(2) fails with EFAULT until
   umio_populate faults it in, and read(2) into a writable mapping works
   once the range is populated for writing. */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <umap/umap.h>
#include <umio.h>

#include "check.h"

#define MIB (1u << 20)

int main(void) {
  errno = 0;
  CHECK(umio_config_set_fault_service(NULL) == -1 && errno == EINVAL);
  errno = 0;
  CHECK(umio_config_set_fault_service("threadz") == -1 && errno == EINVAL);
  CHECK(umio_config_set_fault_service("in-thread") == 0);
  CHECK(umio_config_set_page_size(4096) == 0);
  CHECK(umio_config_set_read_ahead(0) == 0);

  char path[4096], path2[4096];
  const size_t len = 4 * MIB;
  int fd = make_file(path, len, O_RDWR);
  unsigned char *p = umap(NULL, len, PROT_READ | PROT_WRITE, UMAP_PRIVATE, fd, 0);
  CHECK(p != UMAP_FAILED);

  /* Misses and first writes, served in this thread. */
  for (size_t i = 0; i < MIB; i += 4096) CHECK(p[i] == pattern(i));
  p[8192] ^= 0xff;
  CHECK(p[8192] == (unsigned char)(pattern(8192) ^ 0xff));
  p[8192] ^= 0xff;

  /* write(2) from pages not resident: EFAULT, then fine once populated. */
  int pipefd[2];
  CHECK(pipe(pipefd) == 0);
  errno = 0;
  CHECK(write(pipefd[1], p + 2 * MIB, 4096) == -1 && errno == EFAULT);
  CHECK(umio_populate(p + 2 * MIB, 4096, 0) == 0);
  CHECK(write(pipefd[1], p + 2 * MIB, 4096) == 4096);
  unsigned char got[4096];
  CHECK(read(pipefd[0], got, sizeof got) == 4096);
  for (size_t i = 0; i < sizeof got; i++) CHECK(got[i] == pattern(2 * MIB + i));

  /* read(2) into the mapping: populated for writing first. */
  int src = make_file(path2, 65536, O_RDWR);
  CHECK(umio_populate(p + 3 * MIB, 65536, 1) == 0);
  CHECK(pread(src, p + 3 * MIB, 65536, 0) == 65536);
  for (size_t i = 0; i < 65536; i++) CHECK(p[3 * MIB + i] == pattern(i));

  errno = 0;
  CHECK(umio_populate(p + len, 4096, 0) == -1 && errno == EINVAL);

  struct umio_runtime_stats s = {.size = sizeof s};
  CHECK(umio_runtime_stats(&s) == 0);
  CHECK(s.faults > 256);
  CHECK(s.in_thread_faults == s.faults);

  CHECK(uunmap(p, len) == 0);
  close(fd);
  close(src);
  unlink(path);
  unlink(path2);
  puts("in_thread: ok");
  return 0;
}
