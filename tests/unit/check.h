/* check.h - the assertions every C unit test uses: a failing check prints file:line and the values,
 * counts the failure, and the test's exit status is the failure count (0 = pass). */
#ifndef MP_TEST_CHECK_H
#define MP_TEST_CHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int check_failures;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond);               \
            check_failures++;                                                                      \
        }                                                                                          \
    } while (0)

#define CHECK_INT(a, b)                                                                            \
    do {                                                                                           \
        long long check_a_ = (long long)(a), check_b_ = (long long)(b);                            \
        if (check_a_ != check_b_) {                                                                \
            fprintf(stderr, "%s:%d: %s == %lld, expected %s == %lld\n", __FILE__, __LINE__, #a,    \
                    check_a_, #b, check_b_);                                                       \
            check_failures++;                                                                      \
        }                                                                                          \
    } while (0)

/* |a − b| <= tol·max(1, |b|) */
#define CHECK_NEAR(a, b, tol)                                                                      \
    do {                                                                                           \
        double check_a_ = (double)(a), check_b_ = (double)(b);                                     \
        double check_s_ = fabs(check_b_) > 1.0 ? fabs(check_b_) : 1.0;                             \
        if (!(fabs(check_a_ - check_b_) <= (tol) * check_s_)) {                                    \
            fprintf(stderr, "%s:%d: %s == %.10g, expected %s == %.10g (tol %g)\n", __FILE__,       \
                    __LINE__, #a, check_a_, #b, check_b_, (double)(tol));                          \
            check_failures++;                                                                      \
        }                                                                                          \
    } while (0)

#define CHECK_STR(a, b)                                                                            \
    do {                                                                                           \
        const char *check_a_ = (a), *check_b_ = (b);                                               \
        if (!check_a_ || !check_b_ || strcmp(check_a_, check_b_) != 0) {                           \
            fprintf(stderr, "%s:%d: %s == \"%s\", expected \"%s\"\n", __FILE__, __LINE__, #a,      \
                    check_a_ ? check_a_ : "(null)", check_b_ ? check_b_ : "(null)");               \
            check_failures++;                                                                      \
        }                                                                                          \
    } while (0)

#define CHECK_DONE()                                                                               \
    do {                                                                                           \
        if (check_failures)                                                                        \
            fprintf(stderr, "%d check(s) failed\n", check_failures);                               \
        return check_failures ? 1 : 0;                                                             \
    } while (0)

/* A new scratch directory $TMPDIR/NAME.XXXXXX (/tmp without TMPDIR) into dir (size bytes); exits
 * 1 with a message when it cannot be made, as a test without its scratch directory tests nothing. */
static inline void check_tmpdir(char *dir, size_t size, const char *name)
{
    const char *tmp = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(dir, size, "%s/%s.XXXXXX", tmp, name);
    if (!mkdtemp(dir)) {
        perror(dir);
        exit(1);
    }
}

/* Remove the files named in `files` (NULL-ended; missing ones are fine) and then the directory
 * made by check_tmpdir; a directory that cannot be removed (a file left behind) is a failure. */
static inline void check_tmpdir_remove(const char *dir, const char *const *files)
{
    for (int i = 0; files[i]; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        unlink(path);
    }
    if (rmdir(dir) != 0) {
        perror(dir);
        check_failures++;
    }
}

#endif
