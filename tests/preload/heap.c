/* Heap mode: large arrays, together larger than the cache, keep their
 * contents; calloc reads zero (also on reused extents); realloc keeps the
 * contents; aligned allocations are aligned; a fork child reads the
 * parent's arrays. Usage: heap ARRAYS MIB_EACH */
#include "check.h"
#include <malloc.h>

static uint64_t **arrays;
static size_t n, each;

static void child(void *arg) {
    (void)arg;
    CHECK(mismatch(arrays[0], 0, each, 100) < 0);
    CHECK(mismatch(arrays[n - 1], 0, each, 100 + n - 1) < 0);
    /* The child's own allocations and frees work. */
    uint64_t *mine = malloc(each);
    CHECK(mine != NULL);
    fill(mine, 0, each, 9);
    CHECK(mismatch(mine, 0, each, 9) < 0);
    free(mine);
    free(arrays[0]);
    exit(0);
}

int main(int argc, char **argv) {
    CHECK(argc == 3);
    n = (size_t)atoi(argv[1]);
    each = (size_t)atoi(argv[2]) << 20;
    arrays = calloc(n, sizeof *arrays);
    CHECK(arrays != NULL);
    for (size_t i = 0; i < n; i++) {
        arrays[i] = malloc(each);
        CHECK(arrays[i] != NULL);
        CHECK(malloc_usable_size(arrays[i]) >= each);
        fill(arrays[i], 0, each, 100 + i);
    }
    for (size_t i = 0; i < n; i++)
        CHECK(mismatch(arrays[i], 0, each, 100 + i) < 0);

    int status = in_child(child, NULL);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);

    /* Free every other array; calloc reuses their extents and reads zero. */
    for (size_t i = 0; i < n; i += 2) {
        free(arrays[i]);
        arrays[i] = NULL;
    }
    for (size_t i = 0; i < n; i += 2) {
        uint64_t *z = calloc(each / 8, 8);
        CHECK(z != NULL);
        for (size_t w = 0; w < each / 8; w++)
            CHECK(z[w] == 0);
        arrays[i] = z;
    }
    for (size_t i = 1; i < n; i += 2)
        CHECK(mismatch(arrays[i], 0, each, 100 + i) < 0);

    /* realloc grows and keeps the contents. */
    uint64_t *g = realloc(arrays[1], 2 * each);
    CHECK(g != NULL);
    CHECK(mismatch(g, 0, each, 101) < 0);
    fill(g, each, 2 * each, 50);
    CHECK(mismatch(g, each, 2 * each, 50) < 0);
    arrays[1] = g;
    /* A small block grows into a large one. */
    char *s = malloc(100);
    CHECK(s != NULL);
    strcpy(s, "small");
    s = realloc(s, each);
    CHECK(s != NULL && strcmp(s, "small") == 0);
    free(s);

    void *a = NULL;
    CHECK(posix_memalign(&a, 2 << 20, each) == 0);
    CHECK(((uintptr_t)a & ((2 << 20) - 1)) == 0);
    fill(a, 0, each, 60);
    CHECK(mismatch(a, 0, each, 60) < 0);
    free(a);
    void *b = aligned_alloc(4096, each);
    CHECK(b != NULL && ((uintptr_t)b & 4095) == 0);
    free(b);

    for (size_t i = 0; i < n; i++)
        free(arrays[i]);
    free(arrays);
    printf("heap ok\n");
    return 0;
}
