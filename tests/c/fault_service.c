/* The fault service per mapping: umio_map_options.fault_service puts one
   mapping in the faulting thread's service while the runtime's default
   (here "fillers") serves another, umio_stats says which each got, a
   plain read(2) into the non-resident in-thread mapping fails with EFAULT
   where the fillers' mapping takes it (full-mode userfaultfd: run as
   root), and umio_read_into / umio_write_from work on either. */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <umio.h>

#include "check.h"

#define MIB (1u << 20)

static unsigned char *map_with(int fd, size_t len, int prot, const char *service) {
  struct umio_map_options o = {.size = sizeof o, .fault_service = service};
  return umio_map(NULL, len, prot, MAP_SHARED, fd, 0, &o);
}

int main(void) {
  CHECK(umio_config_set_fault_service("fillers") == 0);
  CHECK(umio_config_set_page_size(4096) == 0);
  CHECK(umio_config_set_read_ahead(0) == 0);

  char path[4096], path2[4096], path3[4096];
  const size_t len = 4 * MIB;
  int fd = make_file(path, len, O_RDWR);
  int fd2 = make_file(path2, len, O_RDWR);
  int src = make_file(path3, 65536, O_RDWR);
  unsigned char *in = map_with(fd, len, PROT_READ | PROT_WRITE, "in-thread");
  CHECK(in != UMIO_FAILED);
  unsigned char *fl = map_with(fd2, len, PROT_READ | PROT_WRITE, NULL);
  CHECK(fl != UMIO_FAILED);

  struct umio_stats s = {.size = sizeof s};
  CHECK(umio_stats(in, &s) == 0 && s.in_thread == 1);
  CHECK(umio_stats(fl, &s) == 0 && s.in_thread == 0);
  struct umio_runtime_stats rs = {.size = sizeof rs};
  CHECK(umio_runtime_stats(&rs) == 0 && rs.regions == 2 && rs.in_thread_regions == 1);

  /* A plain read(2) into non-resident pages: EFAULT in-thread, served by
     the fillers. */
  errno = 0;
  CHECK(pread(src, in + MIB, 65536, 0) == -1 && errno == EFAULT);
  CHECK(pread(src, fl + MIB, 65536, 0) == 65536);
  for (size_t i = 0; i < 65536; i++) CHECK(fl[MIB + i] == pattern(i));

  /* umio_read_into: fine in either; at an offset, then at the position. */
  for (int k = 0; k < 2; k++) {
    unsigned char *p = k ? fl : in;
    CHECK(umio_read_into(p + 2 * MIB + 7, 65536, src, 0) == 65536);
    for (size_t i = 0; i < 65536; i++) CHECK(p[2 * MIB + 7 + i] == pattern(i));
    CHECK(lseek(src, 100, SEEK_SET) == 100);
    CHECK(umio_read_into(p + 3 * MIB, 1000, src, -1) == 1000);
    for (size_t i = 0; i < 1000; i++) CHECK(p[3 * MIB + i] == pattern(100 + i));
  }
  /* umio_write_from of non-resident pages, into a pipe. */
  int pipefd[2];
  CHECK(pipe(pipefd) == 0);
  errno = 0;
  CHECK(write(pipefd[1], in + 3 * MIB + 65536, 4096) == -1 && errno == EFAULT);
  CHECK(umio_write_from(in + 3 * MIB + 65536, 4096, pipefd[1], -1) == 4096);
  unsigned char got[4096];
  CHECK(read(pipefd[0], got, sizeof got) == 4096);
  for (size_t i = 0; i < sizeof got; i++) CHECK(got[i] == pattern(3 * MIB + 65536 + i));

  /* What read_into wrote reaches the file. */
  CHECK(umio_flush(in, 0) == 0);
  unsigned char back[1000];
  pread_all(fd, back, sizeof back, 3 * MIB);
  for (size_t i = 0; i < sizeof back; i++) CHECK(back[i] == pattern(100 + i));

  /* Bad input. */
  errno = 0;
  CHECK(umio_read_into(in, 0, src, 0) == -1 && errno == EINVAL);
  errno = 0;
  CHECK(umio_read_into(in, 10, -1, 0) == -1 && errno == EBADF);
  errno = 0;
  CHECK(umio_read_into(in, 10, src, -2) == -1 && errno == EINVAL);
  errno = 0;
  CHECK(umio_read_into(in + len - 5, 10, src, 0) == -1 && errno == EINVAL);
  errno = 0;
  CHECK(umio_write_from(path, 10, pipefd[1], -1) == -1 && errno == EINVAL);
  errno = 0;
  CHECK(map_with(fd, len, PROT_READ, "threadz") == UMIO_FAILED && errno == EINVAL);
  unsigned char *ro = map_with(fd, len, PROT_READ, "in-thread");
  CHECK(ro != UMIO_FAILED);
  errno = 0;
  CHECK(umio_read_into(ro, 10, src, 0) == -1 && errno == EINVAL);
  CHECK(umio_unmap(ro, len) == 0);

  CHECK(umio_unmap(in, len) == 0);
  CHECK(umio_unmap(fl, len) == 0);
  close(pipefd[0]);
  close(pipefd[1]);
  close(fd);
  close(fd2);
  close(src);
  unlink(path);
  unlink(path2);
  unlink(path3);
  puts("fault_service: ok");
  return 0;
}
