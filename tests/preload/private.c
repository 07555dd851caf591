/* MAP_PRIVATE through the shim: the mapping sees its own writes under
 * eviction, the file never does (while mapped, after munmap), and
 * MADV_DONTNEED gives a private page the file's contents back.
 * Usage: private PATH MIB */
#include "check.h"

int main(int argc, char **argv) {
    CHECK(argc == 3);
    const char *path = argv[1];
    size_t len = (size_t)atoi(argv[2]) << 20;
    make_file(path, len, 1);

    int fd = open(path, O_RDONLY); /* private mappings write with O_RDONLY too */
    CHECK(fd >= 0);
    char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    CHECK(p != MAP_FAILED);
    CHECK(served_by_umio(p) == expect_umio());

    CHECK(mismatch(p, 0, len, 1) < 0);
    fill(p, 0, len, 5);
    CHECK(mismatch(p, 0, len, 5) < 0); /* read back after eviction */
    CHECK(msync(p, len, MS_SYNC) == 0);
    CHECK(file_holds(path, 0, len, 1));

    /* DONTNEED: the first MiB reads the file again; the rest keeps ours. */
    CHECK(madvise(p, 1 << 20, MADV_DONTNEED) == 0);
    CHECK(mismatch(p, 0, 1 << 20, 1) < 0);
    CHECK(mismatch(p, 1 << 20, len, 5) < 0);

    /* mremap: a private mapping moved to a larger one keeps its writes. */
    char *h = mmap(NULL, len / 2, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    CHECK(h != MAP_FAILED);
    fill(h, 0, len / 4, 6);
    char *g = mremap(h, len / 2, len, MREMAP_MAYMOVE);
    CHECK(g != MAP_FAILED);
    CHECK(mismatch(g, 0, len / 4, 6) < 0);
    CHECK(mismatch(g, len / 4, len, 1) < 0);
    CHECK(munmap(g, len) == 0);

    CHECK(munmap(p, len) == 0);
    CHECK(close(fd) == 0);
    CHECK(file_holds(path, 0, len, 1));
    printf("private ok\n");
    return 0;
}
