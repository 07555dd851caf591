/* madvise on a shared file mapping: MADV_REMOVE frees the range (zeros in
 * the mapping and in the file, the rest of each page kept, dirty bytes
 * outside the range not lost), MADV_PAGEOUT and MADV_COLD lose nothing,
 * MADV_REMOVE on a private mapping or over a read-only descriptor is
 * refused, MADV_FREE on a file mapping is EINVAL.
 *
 * usage: advice FILE MIB */
#include "check.h"

int main(int argc, char **argv) {
    CHECK(argc == 3);
    const char *path = argv[1];
    size_t len = (size_t)atoi(argv[2]) << 20;
    make_file(path, len, 1);
    int fd = open(path, O_RDWR);
    CHECK(fd >= 0);
    unsigned char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(p != MAP_FAILED);
    CHECK(served_by_umio(p) == expect_umio());

    /* Dirty bytes around and inside the range to remove. */
    size_t at = 3 * 65536 + 4096;
    fill(p, at - 8192, at + 3 * 4096, 2);
    CHECK(madvise(p + at, 8192, MADV_REMOVE) == 0);
    for (size_t i = at; i < at + 8192; i++)
        CHECK(p[i] == 0);
    CHECK(mismatch(p, at - 8192, at, 2) == -1);
    CHECK(mismatch(p, at + 8192, at + 3 * 4096, 2) == -1);
    CHECK(mismatch(p, at + 3 * 4096, at + 65536, 1) == -1);
    CHECK(msync(p, len, MS_SYNC) == 0);
    unsigned char buf[8192];
    CHECK(pread(fd, buf, sizeof buf, (off_t)at) == (ssize_t)sizeof buf);
    for (size_t i = 0; i < sizeof buf; i++)
        CHECK(buf[i] == 0);

    /* PAGEOUT and COLD lose nothing. */
    fill(p, len / 2, len / 2 + 65536, 3);
    CHECK(madvise(p, len, MADV_PAGEOUT) == 0);
    CHECK(madvise(p + len / 4, 65536, MADV_COLD) == 0);
    CHECK(mismatch(p, len / 2, len / 2 + 65536, 3) == -1);
    CHECK(mismatch(p, len / 2 + 65536, len, 1) == -1);
    CHECK(munmap(p, len) == 0);
    CHECK(file_holds(path, len / 2, len / 2 + 65536, 3));

    /* Refused as by the kernel. */
    unsigned char *q = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    CHECK(q != MAP_FAILED);
    errno = 0;
    CHECK(madvise(q, 65536, MADV_REMOVE) == -1 && errno == EACCES);
    CHECK(munmap(q, len) == 0);
    int ro = open(path, O_RDONLY);
    CHECK(ro >= 0);
    unsigned char *r = mmap(NULL, len, PROT_READ, MAP_SHARED, ro, 0);
    CHECK(r != MAP_FAILED);
    errno = 0;
    CHECK(madvise(r, 65536, MADV_REMOVE) == -1 && errno == EACCES);
    errno = 0;
    CHECK(madvise(r, 65536, MADV_FREE) == -1 && errno == EINVAL);
    CHECK(munmap(r, len) == 0);
    close(ro);
    close(fd);
    printf("advice ok\n");
    return 0;
}
