/* pwrite and write over resident pages of a shared mapping show in it at
 * once, and the pages stay resident: under the shim, the test checks that
 * the second pass over the mapping misses nothing (UMIO_STATS).
 *
 * usage: pwrite_inplace FILE MIB */
#include "check.h"

#include <sys/uio.h>

int main(int argc, char **argv) {
    CHECK(argc == 3);
    size_t len = (size_t)atoi(argv[2]) << 20, page = 4096;
    make_file(argv[1], len, 1);
    int fd = open(argv[1], O_RDWR);
    CHECK(fd >= 0);
    const uint64_t *p = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
    CHECK(p != MAP_FAILED);
    CHECK(served_by_umio(p) == expect_umio());
    CHECK(mismatch(p, 0, len, 1) == -1); /* every page resident */
    uint64_t buf[4096 / 8];
    /* Every page rewritten in part, by pwrite, write and pwritev. */
    for (size_t off = 0; off < len; off += page) {
        size_t at = off + (off / page % 4) * 512, n = 1024;
        for (size_t i = 0; i < n / 8; i++)
            buf[i] = word(2, at + i * 8);
        switch (off / page % 3) {
        case 0:
            CHECK(pwrite(fd, buf, n, (off_t)at) == (ssize_t)n);
            break;
        case 1:
            CHECK(lseek(fd, (off_t)at, SEEK_SET) == (off_t)at);
            CHECK(write(fd, buf, n) == (ssize_t)n);
            break;
        default: {
            struct iovec iov[2] = {{buf, n / 2}, {(char *)buf + n / 2, n / 2}};
            CHECK(pwritev(fd, iov, 2, (off_t)at) == (ssize_t)n);
        }
        }
        /* At once, and only those bytes. */
        CHECK(mismatch(p, at, at + n, 2) == -1);
        CHECK(mismatch(p, off, at, 1) == -1);
        CHECK(mismatch(p, at + n, off + page, 1) == -1);
    }
    printf("pwrite_inplace ok\n");
    return 0;
}
