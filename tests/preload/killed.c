/* A writer through a MAP_SHARED mapping that is killed: it writes pattern
 * 1, 2, 3, ... over every page of the file in turn, for ever, and after
 * every 16 pages tells its parent how far it got ("marker SEED PAGES":
 * the first PAGES pages hold pattern SEED, every other page pattern
 * SEED - 1 or later). The parent SIGKILLs it at some marker; with the
 * kernel, the file then holds every byte written before that marker (the
 * page cache outlives the process), whatever was written back before.
 * Usage: killed PATH MIB */
#include "check.h"

int main(int argc, char **argv) {
    CHECK(argc == 3);
    const char *path = argv[1];
    size_t len = (size_t)atoi(argv[2]) << 20;
    size_t page = 4096, npages = len / page;
    make_file(path, len, 0);

    int fd = open(path, O_RDWR);
    CHECK(fd >= 0);
    char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(p != MAP_FAILED);
    CHECK(close(fd) == 0);
    CHECK(served_by_umio(p) == expect_umio());
    for (uint64_t seed = 1; seed < 200; seed++) {
        for (size_t pg = 0; pg < npages; pg++) {
            fill(p, pg * page, (pg + 1) * page, seed);
            if ((pg + 1) % 16 == 0) {
                char line[64];
                int n = snprintf(line, sizeof line, "marker %llu %zu\n",
                                 (unsigned long long)seed, pg + 1);
                CHECK(write(1, line, (size_t)n) == n);
            }
        }
    }
    /* Never reached in the test: the parent kills it before. */
    printf("killed ok: not killed\n");
    return 0;
}
