/* A process that ends with _exit keeps what it wrote to a shared mapping,
 * as with the kernel's page cache: the mapping is never unmapped.
 *
 * usage: exit_now FILE MIB
 * The parent (the test) checks the file afterwards: pattern 5 over the
 * first half, pattern 1 (make_file's) over the rest. */
#include "check.h"

int main(int argc, char **argv) {
    CHECK(argc == 3);
    size_t len = (size_t)atoi(argv[2]) << 20;
    make_file(argv[1], len, 1);
    int fd = open(argv[1], O_RDWR);
    CHECK(fd >= 0);
    char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(p != MAP_FAILED);
    CHECK(served_by_umio(p) == expect_umio());
    fill(p, 0, len / 2, 5);
    printf("exit_now ok\n");
    fflush(stdout);
    _exit(0);
}
