/* The offset is honoured (UMap ignores it); bytes past the end of the file
   read as zeros; writes at an offset land there and nowhere else. */
#include <umap/umap.h>
#include <umio.h>

#include "check.h"

int main(void) {
  char path[4096];
  const size_t flen = 5 * 4096 + 1000; /* not a multiple of any page size */
  int fd = make_file(path, flen, O_RDWR);
  const off_t off = 2 * 4096;

  /* Read-only, from an offset, reaching 100 KiB past the end of the file. */
  const size_t len = (flen - (size_t)off) + (100 << 10);
  unsigned char *p = umap(NULL, len, PROT_READ, UMAP_PRIVATE, fd, off);
  CHECK(p != UMAP_FAILED);
  for (size_t i = 0; i < flen - (size_t)off; i++) CHECK(p[i] == pattern((uint64_t)off + i));
  for (size_t i = flen - (size_t)off; i < len; i++) CHECK(p[i] == 0);
  struct stat sb;
  CHECK(fstat(fd, &sb) == 0 && (size_t)sb.st_size == flen); /* read-only: file unchanged */
  CHECK(uunmap(p, len) == 0);

  /* Writable, at an offset: the write lands at offset + i. */
  p = umap(NULL, 4096, PROT_READ | PROT_WRITE, UMAP_PRIVATE, fd, 3 * 4096);
  CHECK(p != UMAP_FAILED);
  CHECK(p[0] == pattern(3 * 4096));
  memcpy(p + 100, "at an offset", 12);
  CHECK(uunmap(p, 4096) == 0);
  char buf[12];
  pread_all(fd, buf, 12, 3 * 4096 + 100);
  CHECK(memcmp(buf, "at an offset", 12) == 0);
  unsigned char before[4096];
  pread_all(fd, before, sizeof before, 2 * 4096);
  for (size_t i = 0; i < sizeof before; i++) CHECK(before[i] == pattern(2 * 4096 + i));

  /* Writable past the end: the file is extended, the new bytes are zeros. */
  const size_t wlen = 8 * 4096;
  p = umap(NULL, wlen, PROT_READ | PROT_WRITE, UMAP_PRIVATE, fd, 4 * 4096);
  CHECK(p != UMAP_FAILED);
  CHECK(fstat(fd, &sb) == 0 && (size_t)sb.st_size == 4 * 4096 + wlen);
  for (size_t i = 0; i < flen - 4 * 4096; i++) CHECK(p[i] == pattern(4 * 4096 + i));
  for (size_t i = flen - 4 * 4096; i < wlen; i++) CHECK(p[i] == 0);
  p[wlen - 1] = 'z';
  CHECK(uunmap(p, wlen) == 0);
  pread_all(fd, buf, 1, (off_t)(4 * 4096 + wlen - 1));
  CHECK(buf[0] == 'z');

  /* An offset past the end: all zeros. */
  p = umap(NULL, 4096, PROT_READ, UMAP_PRIVATE, fd, 64 * 4096);
  CHECK(p != UMAP_FAILED);
  for (size_t i = 0; i < 4096; i++) CHECK(p[i] == 0);
  CHECK(uunmap(p, 4096) == 0);

  printf("offset_tail: offset honoured, tail zero, extension checked\n");
  close(fd);
  unlink(path);
  return 0;
}
