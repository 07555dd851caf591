/* mmap MAP_FIXED over an earlier file mapping replaces that part of it, as
 * the kernel does: the earlier mapping's dirty bytes there reach its file
 * first, the rest of it keeps working, and the new mapping shows its own
 * file. Files mapped one after another with MAP_FIXED into a reservation
 * work as well. MAP_FIXED_NOREPLACE over a mapping fails with EEXIST.
 *
 * Under the shim (64 KiB umio pages) a MAP_FIXED that would cut through a
 * umio page of the earlier mapping whose bytes outside the range are still
 * mapped fails with EINVAL and changes nothing (a umio page cannot be
 * split); the kernel maps it. Both outcomes are checked.
 * Usage: fixed PATH MIB (MIB >= 4) */
#include "check.h"

#define KIB 1024u
#define MIB (1024u * 1024u)

static char *open_map(const char *path, void *at, size_t len, int flags) {
    int fd = open(path, O_RDWR);
    CHECK(fd >= 0);
    char *p = mmap(at, len, PROT_READ | PROT_WRITE, MAP_SHARED | flags, fd, 0);
    int e = errno;
    CHECK(close(fd) == 0);
    errno = e;
    return p;
}

int main(int argc, char **argv) {
    CHECK(argc == 3);
    const char *path = argv[1];
    size_t len = (size_t)atoi(argv[2]) * MIB;
    CHECK(len >= 4 * MIB);
    char b_path[4096], c_path[4096], d_path[4096];
    snprintf(b_path, sizeof b_path, "%s.b", path);
    snprintf(c_path, sizeof c_path, "%s.c", path);
    snprintf(d_path, sizeof d_path, "%s.d", path);
    make_file(path, len, 1);
    make_file(b_path, 1 * MIB, 5);
    make_file(c_path, 8 * KIB, 7);
    make_file(d_path, 8 * KIB, 8);

    char *a = open_map(path, NULL, len, 0);
    CHECK(a != MAP_FAILED);
    CHECK(served_by_umio(a) == expect_umio());
    fill(a, 0, len, 2); /* every page dirty */

    /* At a 64 KiB-aligned address inside it. */
    char *b = open_map(b_path, a + MIB, 256 * KIB, MAP_FIXED);
    CHECK(b == a + MIB);
    CHECK(served_by_umio(b) == expect_umio());
    CHECK(mismatch(b, 0, 256 * KIB, 5) < 0);
    /* The replaced bytes were written to the earlier mapping's file. */
    CHECK(file_holds(path, MIB, MIB + 256 * KIB, 2));
    /* The rest of the earlier mapping is as it was, and takes writes. */
    CHECK(mismatch(a, 0, MIB, 2) < 0);
    CHECK(mismatch(a, MIB + 256 * KIB, len, 2) < 0);
    fill(a, 3 * MIB, 4 * MIB, 3);
    fill(b, 0, 64 * KIB, 6);

    /* At a 4 KiB-aligned address that is not 64 KiB-aligned: the shim
     * refuses, the kernel maps. */
    char *at = a + 2 * MIB + 4 * KIB;
    char *odd = open_map(b_path, at, 8 * KIB, MAP_FIXED);
    if (expect_umio()) {
        CHECK(odd == MAP_FAILED && errno == EINVAL);
        CHECK(mismatch(a, 2 * MIB, 3 * MIB, 2) < 0);
    } else {
        CHECK(odd == at);
        CHECK(mismatch(odd, 0, 8 * KIB, 6) < 0); /* b wrote them */
        CHECK(file_holds(path, 2 * MIB + 4 * KIB, 2 * MIB + 12 * KIB, 2));
        CHECK(mismatch(a, 2 * MIB, 2 * MIB + 4 * KIB, 2) < 0);
        CHECK(mismatch(a, 2 * MIB + 12 * KIB, 3 * MIB, 2) < 0);
    }

    /* MAP_FIXED_NOREPLACE refuses to map over it. */
    errno = 0;
    CHECK(open_map(b_path, a + 3 * MIB, 64 * KIB, MAP_FIXED_NOREPLACE) == MAP_FAILED);
    CHECK(errno == EEXIST);
    CHECK(mismatch(a, 3 * MIB, 4 * MIB, 3) < 0);

    CHECK(msync(a, len, MS_SYNC) == 0);
    CHECK(msync(b, 256 * KIB, MS_SYNC) == 0);
    CHECK(file_holds(path, 3 * MIB, 4 * MIB, 3));
    CHECK(file_holds(b_path, 0, 64 * KIB, 6));
    CHECK(file_holds(b_path, 64 * KIB, MIB, 5));
    CHECK(munmap(a, len) == 0);

    /* Small files one after another in a reservation, each MAP_FIXED at
     * the 4 KiB page after the last. */
    char *r = mmap(NULL, MIB, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(r != MAP_FAILED);
    char *c = open_map(c_path, r, 8 * KIB, MAP_FIXED);
    CHECK(c == r);
    char *d = open_map(d_path, r + 8 * KIB, 8 * KIB, MAP_FIXED);
    CHECK(d == r + 8 * KIB);
    CHECK(served_by_umio(c) == expect_umio() && served_by_umio(d) == expect_umio());
    CHECK(mismatch(c, 0, 8 * KIB, 7) < 0);
    CHECK(mismatch(d, 0, 8 * KIB, 8) < 0);
    fill(c, 0, 8 * KIB, 9);
    CHECK(mismatch(d, 0, 8 * KIB, 8) < 0);
    CHECK(munmap(r, MIB) == 0);
    CHECK(file_holds(c_path, 0, 8 * KIB, 9));
    CHECK(file_holds(d_path, 0, 8 * KIB, 8));

    unlink(b_path);
    unlink(c_path);
    unlink(d_path);
    printf("fixed ok\n");
    return 0;
}
