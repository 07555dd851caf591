/* Helpers of the C tests: CHECK, temporary files, a byte pattern. */
#ifndef UMIO_TEST_CHECK_H
#define UMIO_TEST_CHECK_H

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* Fails the test with the condition, its place and errno. */
#define CHECK(cond)                                                          \
  do {                                                                       \
    if (!(cond)) {                                                           \
      int e_ = errno;                                                        \
      fprintf(stdout, "%s:%d: check failed: %s (errno %d: %s)\n", __FILE__, \
              __LINE__, #cond, e_, strerror(e_));                            \
      fflush(stdout);                                                        \
      exit(1);                                                               \
    }                                                                        \
  } while (0)

/* The byte a test file holds at `off`: varies within and across pages. */
static inline unsigned char pattern(uint64_t off) {
  uint64_t x = off * 0x9E3779B97F4A7C15ull;
  return (unsigned char)(x >> 56) ^ (unsigned char)(off >> 12);
}

/* How long, in 1 ms polls, a test waits for the runtime's background work
   (a release on another thread, a prefetch, an eviction round) before it
   counts as hung: a minute, a hang detector, not a speed check (a busy
   machine may keep a thread off the CPU for seconds). */
#define HANG_MS 60000

/* Polls `cond` every millisecond until it holds, for HANG_MS at most; the
   caller CHECKs what it needs after. */
#define WAIT_UNTIL(cond)                                          \
  do {                                                            \
    for (int w_ = 0; w_ < HANG_MS && !(cond); w_++) usleep(1000); \
  } while (0)

/* Holds, until the process ends, the lock that every test reading or
   changing the system's 2 MiB hugetlb pool (vm.nr_hugepages) takes, so that
   two test suites running at once do not see each other's pool (the Rust
   suite's tests/huge_pages.rs takes it too). */
static inline void lock_hugetlb_pool(void) {
  int fd = open("/tmp/umio-hugetlb-pool.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  CHECK(fd >= 0);
  CHECK(flock(fd, LOCK_EX) == 0);
}

/* A new file of `len` pattern bytes in $TMPDIR, open O_RDWR (or with
   `flags`); its path is written to `path` (PATH_MAX bytes). */
static inline int make_file(char *path, size_t len, int flags) {
  const char *dir = getenv("TMPDIR");
  snprintf(path, 4096, "%s/umio-c-XXXXXX", dir && *dir ? dir : "/tmp");
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  unsigned char buf[65536];
  for (size_t done = 0; done < len;) {
    size_t n = len - done < sizeof buf ? len - done : sizeof buf;
    for (size_t i = 0; i < n; i++) buf[i] = pattern(done + i);
    CHECK(pwrite(fd, buf, n, (off_t)done) == (ssize_t)n);
    done += n;
  }
  if (flags != O_RDWR) {
    close(fd);
    fd = open(path, flags);
    CHECK(fd >= 0);
  }
  return fd;
}

/* Reads all of [off, off + len) of `fd` into `buf`. */
static inline void pread_all(int fd, void *buf, size_t len, off_t off) {
  size_t done = 0;
  while (done < len) {
    ssize_t n = pread(fd, (char *)buf + done, len - done, off + (off_t)done);
    CHECK(n > 0);
    done += (size_t)n;
  }
}

/* xorshift64*: a deterministic random stream per seed. */
static inline uint64_t next_random(uint64_t *s) {
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * 0x2545F4914F6CDD1Dull;
}

#endif
