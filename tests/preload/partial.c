/* Partial munmap: the rest of the mapping keeps working, the unmapped
 * part's writes reach the file, and the unmapped range faults (checked in
 * a child, which must die of SIGSEGV touching it).
 * Usage: partial PATH MIB (MIB >= 16) */
#include "check.h"

static char *hole;

static void touch_hole(void *arg) {
    (void)arg;
    volatile char c = *hole;
    (void)c;
}

int main(int argc, char **argv) {
    CHECK(argc == 3);
    const char *path = argv[1];
    size_t len = (size_t)atoi(argv[2]) << 20, mib = 1 << 20;
    CHECK(len >= 16 * mib);
    make_file(path, len, 1);

    int fd = open(path, O_RDWR);
    CHECK(fd >= 0);
    char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(p != MAP_FAILED);
    CHECK(served_by_umio(p) == expect_umio());
    fill(p, 0, len, 2);

    CHECK(munmap(p + 4 * mib, 4 * mib) == 0);
    /* One 4 KiB page out of the middle of a larger umio page. */
    CHECK(munmap(p + 12 * mib + 4096, 4096) == 0);
    CHECK(mismatch(p, 0, 4 * mib, 2) < 0);
    CHECK(mismatch(p, 8 * mib, 12 * mib + 4096, 2) < 0);
    CHECK(mismatch(p, 12 * mib + 8192, len, 2) < 0);
    fill(p, 9 * mib, 10 * mib, 3);

    hole = p + 5 * mib;
    int status = in_child(touch_hole, NULL);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV);
    hole = p + 12 * mib + 4096;
    status = in_child(touch_hole, NULL);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV);

    /* MAP_FIXED onto the 4 KiB hole inside a umio page: refused under the
     * shim (documented), the kernel's to give otherwise. */
    errno = 0;
    char *fx = mmap(p + 12 * mib + 4096, 4096, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (expect_umio()) {
        CHECK(fx == MAP_FAILED && errno == EINVAL);
    } else {
        CHECK(fx == p + 12 * mib + 4096);
        CHECK(munmap(fx, 4096) == 0);
    }

    /* A new mapping may land in the hole; unmapping it must not disturb ours. */
    char *a = mmap(p + 4 * mib, mib, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    CHECK(a == p + 4 * mib);
    memset(a, 7, mib);
    CHECK(munmap(a, mib) == 0);
    CHECK(mismatch(p, 0, 4 * mib, 2) < 0);

    CHECK(file_holds(path, 4 * mib, 8 * mib, 2)); /* written back by munmap */
    CHECK(munmap(p, len) == 0); /* the rest, holes included */
    CHECK(file_holds(path, 0, 9 * mib, 2));
    CHECK(file_holds(path, 9 * mib, 10 * mib, 3));
    CHECK(file_holds(path, 10 * mib, len, 2));
    CHECK(close(fd) == 0);
    printf("partial ok\n");
    return 0;
}
