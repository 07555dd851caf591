/* The C library's own I/O into and out of large heap buffers: `fread`
 * of a whole file into one buffer, `fgets` of its lines through a large
 * stdio buffer of the program's (`setvbuf`) into another, and `fwrite`
 * of it all to a second file through a third. Under the shim's heap mode
 * these buffers are umio memory, never touched before the C library's
 * internal read(2) and write(2) reach them: calls no LD_PRELOAD can
 * interpose, so the heap must be served where the kernel's own accesses
 * are (the fillers), whatever UMIO_FAULT_SERVICE says. The caller
 * compares the files.
 *
 * usage: stdio_heap IN OUT */
#include "check.h"

#define STDIO_BUF (2u << 20)
#define LINE_MAX_ (1u << 16)

int main(int argc, char **argv) {
    CHECK(argc == 3);
    struct stat st;
    CHECK(stat(argv[1], &st) == 0);
    size_t n = (size_t)st.st_size;
    CHECK(n > 0);

    /* fread: one call for the whole file, straight into the buffer. */
    char *whole = malloc(n + 1);
    CHECK(whole != NULL);
    FILE *in = fopen(argv[1], "r");
    CHECK(in != NULL);
    CHECK(fread(whole, 1, n, in) == n);
    CHECK(fgetc(in) == EOF && !ferror(in));
    CHECK(fclose(in) == 0);
    whole[n] = 0;

    /* fgets: line by line, through a 2 MiB stdio buffer of ours, into a
     * second large buffer. */
    char *lines = malloc(n + LINE_MAX_);
    char *inbuf = malloc(STDIO_BUF);
    CHECK(lines != NULL && inbuf != NULL);
    in = fopen(argv[1], "r");
    CHECK(in != NULL);
    CHECK(setvbuf(in, inbuf, _IOFBF, STDIO_BUF) == 0);
    size_t off = 0, count = 0;
    while (fgets(lines + off, LINE_MAX_, in) != NULL) {
        off += strlen(lines + off);
        count++;
        CHECK(off <= n);
    }
    CHECK(!ferror(in));
    CHECK(fclose(in) == 0);
    CHECK(off == n);
    CHECK(memcmp(lines, whole, n) == 0);

    /* fwrite: through a 2 MiB stdio buffer of ours, and straight from the
     * first buffer. */
    char *outbuf = malloc(STDIO_BUF);
    CHECK(outbuf != NULL);
    FILE *out = fopen(argv[2], "w");
    CHECK(out != NULL);
    CHECK(setvbuf(out, outbuf, _IOFBF, STDIO_BUF) == 0);
    size_t half = n / 2;
    for (size_t i = 0; i < half;) {
        size_t k = half - i < 1000 ? half - i : 1000;
        CHECK(fwrite(lines + i, 1, k, out) == k);
        i += k;
    }
    CHECK(fwrite(whole + half, 1, n - half, out) == n - half);
    CHECK(fclose(out) == 0);

    free(outbuf);
    free(inbuf);
    free(lines);
    free(whole);
    printf("stdio heap ok: %zu bytes, %zu lines\n", n, count);
    return 0;
}
