/* MAP_SHARED through the shim: every word survives eviction (the cache is
 * much smaller than the file), writes reach the file by msync (before
 * munmap) and by munmap, an offset mapping sees its part of the file,
 * MADV_DONTNEED keeps a shared mapping's writes, mprotect and mremap
 * behave, and bad arguments get the kernel's errno.
 * Usage: shared PATH MIB */
#include "check.h"

int main(int argc, char **argv) {
    CHECK(argc == 3);
    const char *path = argv[1];
    size_t len = (size_t)atoi(argv[2]) << 20;
    size_t page = 4096, npages = len / page;
    make_file(path, len, 1);

    int fd = open(path, O_RDWR);
    CHECK(fd >= 0);
    char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(p != MAP_FAILED);
    CHECK(close(fd) == 0); /* the mapping keeps the file */
    CHECK(served_by_umio(p) == expect_umio());

    /* Read every page in a scattered order, then write them all. */
    for (size_t i = 0; i < npages; i++) {
        size_t pg = (i * 7919) % npages;
        CHECK(mismatch(p, pg * page, (pg + 1) * page, 1) < 0);
    }
    for (size_t i = 0; i < npages; i++) {
        size_t pg = (i * 104729) % npages;
        fill(p, pg * page, (pg + 1) * page, 2);
    }
    CHECK(mismatch(p, 0, len, 2) < 0);

    /* Durable after msync, while still mapped. */
    CHECK(msync(p, len, MS_SYNC) == 0);
    CHECK(file_holds(path, 0, len, 2));

    /* MADV_DONTNEED on a shared mapping keeps what was written. */
    fill(p, 0, len / 4, 3);
    CHECK(madvise(p, len / 4, MADV_DONTNEED) == 0);
    CHECK(mismatch(p, 0, len / 4, 3) < 0);
    CHECK(madvise(p, len, MADV_SEQUENTIAL) == 0);
    CHECK(madvise(p, len, MADV_WILLNEED) == 0);
    CHECK(posix_madvise(p, len, POSIX_MADV_RANDOM) == 0);

    /* mprotect: read-only, then writable again. */
    CHECK(mprotect(p, len, PROT_READ) == 0);
    CHECK(mismatch(p, len / 2, len / 2 + page, 2) < 0);
    CHECK(mprotect(p, len, PROT_READ | PROT_WRITE) == 0);
    fill(p, len / 2, len / 2 + page, 3);
    /* PROT_NONE: the kernel's, refused on umio's (documented). */
    errno = 0;
    int none = mprotect(p, page, PROT_NONE);
    if (expect_umio()) {
        CHECK(none == -1 && errno == EACCES);
    } else {
        CHECK(none == 0);
        CHECK(mprotect(p, page, PROT_READ | PROT_WRITE) == 0);
    }

    /* Kernel errnos for bad arguments. */
    errno = 0;
    CHECK(msync(p + 1, page, MS_SYNC) == -1 && errno == EINVAL);
    errno = 0;
    CHECK(msync(p, page, MS_SYNC | MS_ASYNC) == -1 && errno == EINVAL);
    errno = 0;
    CHECK(munmap(p + 1, page) == -1 && errno == EINVAL);
    errno = 0;
    CHECK(mremap(p, len, 2 * len, 0) == MAP_FAILED && errno == ENOMEM);

    /* munmap writes back. */
    CHECK(munmap(p, len) == 0);
    CHECK(file_holds(path, 0, len / 4, 3));
    CHECK(file_holds(path, len / 4, len / 2, 2));
    CHECK(file_holds(path, len / 2, len / 2 + page, 3));
    CHECK(file_holds(path, len / 2 + page, len, 2));

    /* An offset mapping, read-only descriptor: its part of the file. */
    fd = open(path, O_RDONLY);
    CHECK(fd >= 0);
    size_t off = len / 4, mlen = len / 2;
    uint64_t *q = mmap(NULL, mlen, PROT_READ, MAP_SHARED, fd, (off_t)off);
    CHECK(q != MAP_FAILED);
    CHECK(served_by_umio(q) == expect_umio());
    for (size_t i = 0; i < mlen / 8; i++) {
        uint64_t want = word(off + i * 8 < len / 2 || off + i * 8 >= len / 2 + page ? 2 : 3, off + i * 8);
        CHECK(q[i] == want);
    }
    /* Writing needs a descriptor open for writing, as with the kernel. */
    errno = 0;
    CHECK(mprotect(q, mlen, PROT_READ | PROT_WRITE) == -1 && errno == EACCES);
    errno = 0;
    CHECK(mmap(NULL, mlen, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) == MAP_FAILED && errno == EACCES);
    CHECK(munmap(q, mlen) == 0);
    CHECK(close(fd) == 0);

    /* mremap: grow by moving keeps the contents, shrink in place. */
    fd = open(path, O_RDWR);
    CHECK(fd >= 0);
    char *r = mmap(NULL, len / 4, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(r != MAP_FAILED);
    fill(r, 0, page, 4);
    char *g = mremap(r, len / 4, len / 2, MREMAP_MAYMOVE);
    CHECK(g != MAP_FAILED);
    CHECK(served_by_umio(g) == expect_umio());
    CHECK(mismatch(g, 0, page, 4) < 0);
    CHECK(mismatch(g, page, len / 4, 3) < 0);
    CHECK(mismatch(g, len / 4, len / 2, 2) < 0 || mismatch(g, len / 2 - page, len / 2, 2) < 0);
    char *s = mremap(g, len / 2, len / 8, 0);
    CHECK(s == g);
    CHECK(mismatch(s, 0, page, 4) < 0);
    CHECK(munmap(s, len / 8) == 0);
    CHECK(close(fd) == 0);
    CHECK(file_holds(path, 0, page, 4));
    printf("shared ok\n");
    return 0;
}
