/* Four threads at once, each in its own quarter of one file: map it,
 * write it, msync, unmap, check the file; each also allocates, fills and
 * frees large blocks (heap mode when enabled). Usage: threads PATH MIB */
#include "check.h"
#include <pthread.h>

#define THREADS 4
#define ROUNDS 8

static const char *path;
static size_t quarter;

static void *worker(void *arg) {
    size_t t = (size_t)arg, off = t * quarter;
    for (int round = 0; round < ROUNDS; round++) {
        uint64_t seed = 10 + t * ROUNDS + (size_t)round;
        int fd = open(path, O_RDWR);
        CHECK(fd >= 0);
        char *p = mmap(NULL, quarter, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)off);
        CHECK(p != MAP_FAILED);
        CHECK(close(fd) == 0);
        CHECK(served_by_umio(p) == expect_umio());
        /* Pattern words are those of the file offset. */
        uint64_t *w = (uint64_t *)p;
        for (size_t i = 0; i < quarter / 8; i++)
            w[i] = word(seed, off + i * 8);
        CHECK(msync(p, quarter / 2, MS_SYNC) == 0);
        CHECK(file_holds(path, off, off + quarter / 2, seed));
        CHECK(munmap(p, quarter) == 0);
        CHECK(file_holds(path, off, off + quarter, seed));

        uint64_t *b = malloc(quarter);
        CHECK(b != NULL);
        fill(b, 0, quarter, seed);
        CHECK(mismatch(b, 0, quarter, seed) < 0);
        free(b);
    }
    return NULL;
}

int main(int argc, char **argv) {
    CHECK(argc == 3);
    path = argv[1];
    size_t len = (size_t)atoi(argv[2]) << 20;
    quarter = len / THREADS;
    make_file(path, len, 1);
    pthread_t th[THREADS];
    for (size_t t = 0; t < THREADS; t++)
        CHECK(pthread_create(&th[t], NULL, worker, (void *)t) == 0);
    for (size_t t = 0; t < THREADS; t++)
        CHECK(pthread_join(th[t], NULL) == 0);
    printf("threads ok\n");
    return 0;
}
