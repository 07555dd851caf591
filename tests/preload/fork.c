/* fork: a child sees its parent's shared and private mappings with the
 * parent's writes, writes the shared file itself, and maps a file of its
 * own (a runtime of its own under the shim); the parent's mappings keep
 * working. Usage: fork DIR MIB */
#include "check.h"

static char *shared_map, *private_map;
static size_t len;
static char path_a[4096], path_b[4096], path_c[4096];

static void child(void *arg) {
    (void)arg;
    CHECK(mismatch(shared_map, 0, len / 2, 2) < 0);
    CHECK(mismatch(shared_map, len / 2, len, 1) < 0);
    CHECK(mismatch(private_map, 0, len / 4, 3) < 0);
    CHECK(mismatch(private_map, len / 4, len, 1) < 0);
    /* The child's writes: the last page of the shared file. */
    fill(shared_map, len - 4096, len, 4);
    CHECK(msync(shared_map + len - 4096, 4096, MS_SYNC) == 0);
    /* Private writes in the child stay the child's. */
    fill(private_map, 0, 4096, 6);

    make_file(path_c, len, 7);
    int fd = open(path_c, O_RDWR);
    CHECK(fd >= 0);
    char *c = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(c != MAP_FAILED);
    CHECK(served_by_umio(c) == expect_umio());
    CHECK(mismatch(c, 0, len, 7) < 0);
    fill(c, 0, len, 8);
    CHECK(munmap(c, len) == 0);
    CHECK(file_holds(path_c, 0, len, 8));
    exit(0);
}

int main(int argc, char **argv) {
    CHECK(argc == 3);
    len = (size_t)atoi(argv[2]) << 20;
    snprintf(path_a, sizeof path_a, "%s/fork-a.bin", argv[1]);
    snprintf(path_b, sizeof path_b, "%s/fork-b.bin", argv[1]);
    snprintf(path_c, sizeof path_c, "%s/fork-c.bin", argv[1]);
    make_file(path_a, len, 1);
    make_file(path_b, len, 1);

    int fa = open(path_a, O_RDWR), fb = open(path_b, O_RDONLY);
    CHECK(fa >= 0 && fb >= 0);
    shared_map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fa, 0);
    private_map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE, fb, 0);
    CHECK(shared_map != MAP_FAILED && private_map != MAP_FAILED);
    CHECK(served_by_umio(shared_map) == expect_umio());
    fill(shared_map, 0, len / 2, 2);
    fill(private_map, 0, len / 4, 3);

    int status = in_child(child, NULL);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);

    /* The parent's mappings work on after the fork. */
    CHECK(mismatch(shared_map, 0, len / 2, 2) < 0);
    CHECK(mismatch(private_map, 0, len / 4, 3) < 0);
    CHECK(mismatch(private_map, len / 4, len, 1) < 0);
    fill(shared_map, len / 2, len / 2 + 4096, 5);
    CHECK(munmap(shared_map, len) == 0);
    CHECK(munmap(private_map, len) == 0);
    CHECK(file_holds(path_a, 0, len / 2, 2));
    CHECK(file_holds(path_a, len / 2, len / 2 + 4096, 5));
    CHECK(file_holds(path_a, len - 4096, len, 4)); /* the child's write */
    CHECK(file_holds(path_b, 0, len, 1));
    printf("fork ok\n");
    return 0;
}
