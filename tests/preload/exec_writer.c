/* A writer through a MAP_SHARED mapping that calls exec without unmapping
 * or msync: it writes pattern 1 over the file (which starts as pattern
 * 0), says "ready", waits for a line on stdin (its parent looks for its
 * keeper meanwhile), then execs the program its arguments name. With the
 * kernel the file then holds pattern 1 (the page cache outlives the old
 * address space).
 * Usage: exec_writer PATH MIB PROGRAM [ARGS...] */
#include "check.h"

int main(int argc, char **argv) {
    CHECK(argc >= 4);
    const char *path = argv[1];
    size_t len = (size_t)atoi(argv[2]) << 20;
    make_file(path, len, 0);

    int fd = open(path, O_RDWR);
    CHECK(fd >= 0);
    char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(p != MAP_FAILED);
    CHECK(close(fd) == 0);
    CHECK(served_by_umio(p) == expect_umio());
    fill(p, 0, len, 1);
    CHECK(write(1, "ready\n", 6) == 6);
    char line[16];
    CHECK(read(0, line, sizeof line) > 0);
    execv(argv[3], argv + 3);
    perror("execv");
    return 1;
}
