/* The flags C programs pass to mmap, through umap() and umio_map, beside
   mmap(2) on the same file: what each reads back, what is resident, and
   what is refused. */
#include <sys/mman.h>

#include <umap/umap.h>
#include <umio.h>

#include "check.h"

#define PAGE (64u << 10)
#define LEN (16 * PAGE)

#ifndef MAP_HUGE_2MB
#define MAP_HUGE_2MB (21 << MAP_HUGE_SHIFT)
#endif
#ifndef MAP_HUGE_1GB
#define MAP_HUGE_1GB (30 << MAP_HUGE_SHIFT)
#endif

static size_t resident(const void *p, size_t len) {
  unsigned char vec[LEN / 4096];
  CHECK(mincore((void *)p, len, vec) == 0);
  size_t n = 0;
  for (size_t i = 0; i < len / 4096; i++) n += vec[i] & 1;
  return n * 4096;
}

static int same_as_file(const unsigned char *p, size_t len) {
  for (size_t i = 0; i < len; i++)
    if (p[i] != pattern(i)) return 0;
  return 1;
}

struct row {
  const char *name;
  int flags;
  int fd_minus_one; /* anonymous */
  int want_errno;   /* 0: maps */
  int want_resident; /* all pages resident right after the call */
};

int main(void) {
  char path[4096];
  CHECK(umio_config_set_page_size(PAGE) == 0);
  CHECK(umio_config_set_cache_bytes(64 * PAGE) == 0);
  int fd = make_file(path, LEN, O_RDWR);
  lock_hugetlb_pool();
  int hugepages = 0;
  FILE *f = fopen("/proc/sys/vm/nr_hugepages", "r");
  if (f) {
    CHECK(fscanf(f, "%d", &hugepages) == 1);
    fclose(f);
  }
  const struct row rows[] = {
      {"MAP_SHARED", MAP_SHARED, 0, 0, 0},
      {"MAP_PRIVATE", MAP_PRIVATE, 0, 0, 0},
      {"MAP_NORESERVE", MAP_SHARED | MAP_NORESERVE, 0, 0, 0},
      {"MAP_POPULATE", MAP_SHARED | MAP_POPULATE, 0, 0, 1},
      {"MAP_LOCKED", MAP_SHARED | MAP_LOCKED, 0, 0, 1},
      {"MAP_ANONYMOUS", MAP_PRIVATE | MAP_ANONYMOUS, 1, 0, 0},
      {"MAP_HUGETLB | MAP_HUGE_2MB", MAP_SHARED | MAP_HUGETLB | MAP_HUGE_2MB, 0,
       hugepages > 0 ? 0 : ENOMEM, 0},
      {"MAP_HUGETLB | MAP_HUGE_1GB", MAP_SHARED | MAP_HUGETLB | MAP_HUGE_1GB, 0, EINVAL, 0},
      {"MAP_GROWSDOWN", MAP_SHARED | MAP_GROWSDOWN, 0, EINVAL, 0},
      {"MAP_SYNC", MAP_SHARED_VALIDATE | MAP_SYNC, 0, EINVAL, 0},
      {"no sharing type", MAP_NORESERVE, 0, EINVAL, 0},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    const struct row *r = &rows[i];
    int mfd = r->fd_minus_one ? -1 : fd;
    for (int api = 0; api < 2; api++) {
      errno = 0;
      unsigned char *u =
          api == 0 ? umap(NULL, LEN, PROT_READ | PROT_WRITE, r->flags, mfd, 0)
                   : umio_map(NULL, LEN, PROT_READ | PROT_WRITE, r->flags, mfd, 0, NULL);
      if (r->want_errno) {
        if (u != MAP_FAILED || errno != r->want_errno) {
          fprintf(stderr, "%s (%s): got %p, errno %d, want errno %d\n", r->name,
                  api ? "umio_map" : "umap", (void *)u, errno, r->want_errno);
          exit(1);
        }
        continue;
      }
      if (u == MAP_FAILED) {
        fprintf(stderr, "%s (%s): errno %d\n", r->name, api ? "umio_map" : "umap", errno);
        exit(1);
      }
      if (r->want_resident && resident(u, LEN) != LEN) {
        fprintf(stderr, "%s: %zu of %u bytes resident after the call\n", r->name,
                resident(u, LEN), LEN);
        exit(1);
      }
      /* Beside the kernel: the same bytes (zeros for anonymous memory). */
      unsigned char *k = mmap(NULL, LEN, PROT_READ | PROT_WRITE,
                              (r->flags & MAP_ANONYMOUS) ? r->flags : MAP_SHARED, mfd, 0);
      CHECK(k != MAP_FAILED);
      CHECK(memcmp(u, k, LEN) == 0);
      if (!r->fd_minus_one) CHECK(same_as_file(u, LEN));
      /* Written and read back. */
      memcpy(u + 3 * PAGE + 5, "written", 7);
      CHECK(memcmp(u + 3 * PAGE + 5, "written", 7) == 0);
      CHECK(munmap(k, LEN) == 0);
      if (r->flags & MAP_LOCKED) CHECK(umio_unpin(u, LEN) == 0);
      CHECK(uunmap(u, LEN) == 0);
      /* Put the file back for the next row. */
      if (!r->fd_minus_one) {
        char buf[7];
        for (int j = 0; j < 7; j++) buf[j] = (char)pattern(3 * PAGE + 5 + (size_t)j);
        CHECK(pwrite(fd, buf, 7, 3 * PAGE + 5) == 7);
      }
    }
  }
  close(fd);
  unlink(path);
  /* MAP_LOCKED beyond half of the cache: ENOMEM, nothing mapped. */
  int big = make_file(path, 64 * PAGE, O_RDWR);
  errno = 0;
  CHECK(umap(NULL, 64 * PAGE, PROT_READ, MAP_SHARED | MAP_LOCKED, big, 0) == MAP_FAILED &&
        errno == ENOMEM);
  close(big);
  unlink(path);
  printf("flags: ok\n");
  return 0;
}
