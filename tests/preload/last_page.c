/* First touch of a mapping's last page, for every protection (read,
 * read-write), sharing (shared, private), descriptor mode (read-only,
 * read-write) and length (a multiple of the umio page PAGE, one byte short,
 * one 4 KiB page past): the bytes read are the file's, then zeros up to the
 * end of the 4 KiB page; a write to the last byte reaches the file if the
 * mapping is shared, never if it is private; the file's length never
 * changes. Shared and writable over a read-only descriptor fails with
 * EACCES, as mmap does. Each case runs in a child with an alarm, so that
 * a hang fails the case instead of the test.
 * Usage: last_page DIR PAGE */
#include "check.h"

static const char *dir;
static size_t page;
static int failures;

static unsigned char byte_at(size_t len, size_t i) {
    return (unsigned char)((i * 131 + len) % 255 + 1); /* never 0 */
}

struct scenario {
    int prot, flags, fd_mode;
    size_t len;
};

static void run(void *arg) {
    const struct scenario *s = arg;
    alarm(300); /* a hang detector, not a speed check */
    char path[4096];
    snprintf(path, sizeof path, "%s/last_page.bin", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    unsigned char *buf = malloc(s->len);
    CHECK(buf != NULL);
    for (size_t i = 0; i < s->len; i++)
        buf[i] = byte_at(s->len, i);
    CHECK(pwrite(fd, buf, s->len, 0) == (ssize_t)s->len);
    CHECK(close(fd) == 0);
    fd = open(path, s->fd_mode);
    CHECK(fd >= 0);
    errno = 0;
    unsigned char *p = mmap(NULL, s->len, s->prot, s->flags, fd, 0);
    if (s->flags == MAP_SHARED && (s->prot & PROT_WRITE) && s->fd_mode == O_RDONLY) {
        CHECK(p == MAP_FAILED && errno == EACCES);
        exit(0);
    }
    CHECK(p != MAP_FAILED);
    CHECK(served_by_umio(p) == expect_umio());
    size_t last = (s->len - 1) / page * page;
    size_t end4k = (s->len + 4095) / 4096 * 4096;
    /* The first touch of the mapping is its last page. */
    for (size_t i = last; i < s->len; i++)
        CHECK(p[i] == buf[i]);
    for (size_t i = s->len; i < end4k; i++)
        CHECK(p[i] == 0);
    CHECK(p[0] == buf[0]);
    if (s->prot & PROT_WRITE) {
        p[s->len - 1] = 0;
        CHECK(p[s->len - 1] == 0);
        CHECK(msync(p, s->len, MS_SYNC) == 0);
    }
    CHECK(munmap(p, s->len) == 0);
    CHECK(close(fd) == 0);
    struct stat st;
    CHECK(stat(path, &st) == 0 && (size_t)st.st_size == s->len);
    if (s->prot & PROT_WRITE)
        buf[s->len - 1] = s->flags == MAP_SHARED ? 0 : byte_at(s->len, s->len - 1);
    fd = open(path, O_RDONLY);
    CHECK(fd >= 0);
    unsigned char *got = malloc(s->len);
    CHECK(got != NULL);
    CHECK(pread(fd, got, s->len, 0) == (ssize_t)s->len);
    CHECK(memcmp(got, buf, s->len) == 0);
    exit(0); /* not _exit: the shim prints its counters at exit */
}

int main(int argc, char **argv) {
    CHECK(argc == 3);
    dir = argv[1];
    page = (size_t)strtoul(argv[2], NULL, 0);
    CHECK(page >= 4096 && page % 4096 == 0);
    int prots[] = {PROT_READ, PROT_READ | PROT_WRITE};
    int flags[] = {MAP_SHARED, MAP_PRIVATE};
    int modes[] = {O_RDONLY, O_RDWR};
    size_t lens[] = {2 * page, 2 * page - 1, 2 * page + 4096};
    int cases = 0;
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++)
            for (int c = 0; c < 2; c++)
                for (int d = 0; d < 3; d++) {
                    struct scenario s = {prots[a], flags[b], modes[c], lens[d]};
                    int status = in_child(run, &s);
                    cases++;
                    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                        fprintf(stderr,
                                "last_page: page %zu prot %s %s fd %s len %zu: %s %d\n", page,
                                s.prot & PROT_WRITE ? "rw" : "r",
                                s.flags == MAP_SHARED ? "shared" : "private",
                                s.fd_mode == O_RDWR ? "rw" : "ro", s.len,
                                WIFSIGNALED(status) ? "killed by signal" : "exit",
                                WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
                        failures++;
                    }
                }
    CHECK(cases == 24);
    if (failures)
        return 1;
    printf("last_page ok\n");
    return 0;
}
