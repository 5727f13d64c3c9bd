/* tests/unit/test.h - a tiny test harness: CHECK records failures with file
 * and line and carries on, so one run shows every broken assertion. main()
 * ends with TEST_DONE(), which prints "N passed, N failed" and sets the exit code. */
#ifndef KILN_TEST_H
#define KILN_TEST_H
#include <stdio.h>
#include <string.h>

static int test_passed, test_failed;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (cond) {                                                                                \
            test_passed++;                                                                         \
        } else {                                                                                   \
            test_failed++;                                                                         \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);               \
        }                                                                                          \
    } while (0)

#define CHECK_MSG(cond, ...)                                                                       \
    do {                                                                                           \
        if (cond) {                                                                                \
            test_passed++;                                                                         \
        } else {                                                                                   \
            test_failed++;                                                                         \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);               \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

#define CHECK_STR(a, b)                                                                            \
    CHECK_MSG((a) != NULL && (b) != NULL && strcmp((a), (b)) == 0, "\"%s\" != \"%s\"",             \
              (a) ? (a) : "(null)", (b) ? (b) : "(null)")

#define TEST_DONE()                                                                                \
    do {                                                                                           \
        printf("%d passed, %d failed\n", test_passed, test_failed);                                \
        return test_failed ? 1 : 0;                                                                \
    } while (0)

#endif
