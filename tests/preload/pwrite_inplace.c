/* pwrite and write over resident pages of a shared mapping show in it at
 * once, and the pages stay resident: under the shim, the test checks that
 * no page of FILE is read twice (UMIO_STATS: about MIB + 1 MiB read, the
 * second file's included).
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
    CHECK(munmap((void *)p, len) == 0);
    CHECK(close(fd) == 0);

    /* Over pages dirty in a mapping that is read-only by mprotect: the
     * mapping's writes and the pwrite's both show and both reach the file
     * (a second file of 1 MiB). */
    char path2[4096];
    snprintf(path2, sizeof path2, "%s.2", argv[1]);
    len = 1 << 20;
    make_file(path2, len, 1);
    fd = open(path2, O_RDWR);
    CHECK(fd >= 0);
    unsigned char *q = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(q != MAP_FAILED);
    for (size_t off = 0; off < len; off += 16 * page)
        memset(q + off, 0xd1, 16);
    CHECK(mprotect(q, len, PROT_READ) == 0);
    memset(buf, 0xe2, 16);
    for (size_t off = 0; off < len; off += 16 * page) {
        CHECK(pwrite(fd, buf, 16, (off_t)(off + 100)) == 16);
        CHECK(q[off] == 0xd1 && q[off + 15] == 0xd1);
        CHECK(q[off + 100] == 0xe2 && q[off + 115] == 0xe2);
    }
    CHECK(munmap(q, len) == 0);
    for (size_t off = 0; off < len; off += 16 * page) {
        unsigned char got[116];
        CHECK(pread(fd, got, sizeof got, (off_t)off) == (ssize_t)sizeof got);
        CHECK(got[0] == 0xd1 && got[15] == 0xd1 && got[100] == 0xe2 && got[115] == 0xe2);
    }
    printf("pwrite_inplace ok\n");
    return 0;
}
