/* Write prediction through the C API: a mapping whose read misses are
   each followed by a write has them filled dirty, the write taking no
   second fault (umio_stats.predicted_writes and
   umio_runtime_stats.predicted_writes count them), unless
   UMIO_WRITE_PREDICTION=0 (read by the C library, as the shim and
   Builder::from_env read it). Every write reaches the file either way.
   c_programs.rs runs it with synchronous dirty tracking, once with
   EXPECT_PREDICTED=1 and once with UMIO_WRITE_PREDICTION=0 and
   EXPECT_PREDICTED=0. */
#include <umio.h>

#include "check.h"

#define PAGE 4096
#define PAGES 512

/* The pages in a scattered order (7 is prime to PAGES): no read-ahead. */
static size_t offset_of(size_t i) { return ((i * 7) % PAGES) * PAGE + 100; }

int main(void) {
  const char *expect = getenv("EXPECT_PREDICTED");
  CHECK(expect != NULL && (expect[0] == '0' || expect[0] == '1'));
  CHECK(umio_config_set_page_size(PAGE) == 0);
  CHECK(umio_config_set_cache_bytes(4 * PAGES * PAGE) == 0);
  CHECK(umio_config_set_read_ahead(0) == 0);
  char path[4096];
  const size_t len = PAGES * PAGE;
  int fd = make_file(path, len, O_RDWR);
  unsigned char *p = umio_map(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0, NULL);
  CHECK(p != UMIO_FAILED);
  /* Each page read, then written: a record read, then updated. */
  for (size_t i = 0; i < PAGES; i++) {
    volatile unsigned char *b = p + offset_of(i);
    unsigned char v = *b;
    CHECK(v == pattern(offset_of(i)));
    *b = v ^ 0x5a;
  }
  struct umio_stats s = {.size = sizeof s};
  CHECK(umio_stats(p, &s) == 0);
  struct umio_runtime_stats rs = {.size = sizeof rs};
  CHECK(umio_runtime_stats(&rs) == 0);
  CHECK(rs.read_misses == PAGES);
  if (expect[0] == '1') {
    /* After the first few dozen, all but one in 16 filled dirty. */
    CHECK(s.predicted_writes > PAGES / 2);
    CHECK(rs.predicted_writes == s.predicted_writes);
    CHECK(rs.first_writes == PAGES - rs.predicted_writes);
  } else {
    CHECK(s.predicted_writes == 0 && rs.predicted_writes == 0);
    CHECK(rs.first_writes == PAGES);
  }
  CHECK(umio_unmap(p, len) == 0);
  for (size_t i = 0; i < PAGES; i++) {
    unsigned char c;
    pread_all(fd, &c, 1, (off_t)offset_of(i));
    CHECK(c == (pattern(offset_of(i)) ^ 0x5a));
  }
  close(fd);
  unlink(path);
  printf("write_prediction: ok\n");
  return 0;
}
