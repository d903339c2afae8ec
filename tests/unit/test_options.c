/* test_options.c - unit test of the table-driven option parser: every type, lists, sizes, errors
 * and the generated help. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "config.h"
#include "error.h"
#include "git_rev.h"
#include "options.h"

struct topts {
    int check;
    int iters;
    long long seed;
    double timeout;
    long long buf;
    char *backend;
    struct mp_list batch;
    struct mp_list bytes;
    struct mp_strlist routing;
    int world;
    char *out;
    int flush; /* a flag that defaults to on */
};

static const char *const backends[] = {"cpu", "cuda", "model", NULL};
static const char *const routings[] = {"uniform", "zipf:", "hot:",   "lognormal:",
                                       "gate",    "gate:", "trace:", NULL};

#define OFF(f) offsetof(struct topts, f)
static const struct mp_opt table[] = {
    {"check", MP_OPT_FLAG, OFF(check), NULL, 1, 0, NULL, NULL, "verify results"},
    {"iters", MP_OPT_INT, OFF(iters), "20", 1, 1000000, NULL, NULL, "timed iterations"},
    {"seed", MP_OPT_LLONG, OFF(seed), "42", 1, 0, NULL, NULL, "random seed"},
    {"timeout", MP_OPT_DOUBLE, OFF(timeout), "0.5", 0, 3600, NULL, "SEC", "per-point limit"},
    {"buf", MP_OPT_SIZE, OFF(buf), "1M", 1, 0, NULL, NULL, "buffer size"},
    {"backend", MP_OPT_STRING, OFF(backend), "cpu", 1, 0, backends, "NAME", "compute backend"},
    {"batch", MP_OPT_INT_LIST, OFF(batch), "1,16", 1, 65536, NULL, NULL, "batch sizes"},
    {"bytes", MP_OPT_SIZE_LIST, OFF(bytes), NULL, 1, 0, NULL, NULL, "bytes per peer"},
    {"routing", MP_OPT_STRING_LIST, OFF(routing), "uniform", 1, 0, routings, NULL, "routings"},
    {"world", MP_OPT_INT, OFF(world), NULL, 1, 4096, NULL, NULL, "virtual ranks"},
    {"out", MP_OPT_STRING, OFF(out), NULL, 1, 0, NULL, "DIR", "output directory"},
    {"flush-cache", MP_OPT_FLAG, OFF(flush), "1", 1, 0, NULL, NULL, "evict caches"},
    {NULL, 0, 0, NULL, 0, 0, NULL, NULL, NULL},
};

/* Redirect file descriptor `fd` into a temporary file until capture_end. */
struct capture {
    int fd, saved;
    FILE *tmp;
    char text[8192];
};

static void capture_begin(struct capture *c, int fd)
{
    fflush(stdout);
    fflush(stderr);
    c->fd = fd;
    c->tmp = tmpfile();
    c->saved = dup(fd);
    if (!c->tmp || c->saved < 0 || dup2(fileno(c->tmp), fd) < 0) {
        fprintf(stderr, "capture: cannot redirect fd %d\n", fd);
        exit(1);
    }
}

static const char *capture_end(struct capture *c)
{
    fflush(stdout);
    fflush(stderr);
    dup2(c->saved, c->fd);
    close(c->saved);
    rewind(c->tmp);
    size_t n = fread(c->text, 1, sizeof c->text - 1, c->tmp);
    c->text[n] = '\0';
    fclose(c->tmp);
    return c->text;
}

/* Parse argv (NULL-terminated, without the program name); return the status and the message. */
static int parse(struct topts *o, const char *const *args, char *msg, size_t msglen)
{
    char *argv[64] = {"t"};
    int argc = 1;
    while (args[argc - 1])
        argv[argc] = (char *)args[argc - 1], argc++;
    struct capture c;
    capture_begin(&c, 2);
    int rc = mp_opts_parse(table, o, argc, argv, "a test program", NULL, NULL);
    snprintf(msg, msglen, "%s", capture_end(&c));
    return rc;
}

static void check_list(const struct mp_list *l, const long long *want, int n)
{
    CHECK_INT(l->n, n);
    for (int i = 0; i < n && i < l->n; i++)
        CHECK_INT(l->v[i], want[i]);
}

static void test_defaults(void)
{
    struct topts o;
    memset(&o, 0x55, sizeof o); /* parse must set every field */
    char msg[1024];
    const char *args[] = {NULL};
    CHECK_INT(parse(&o, args, msg, sizeof msg), MP_OK);
    CHECK_STR(msg, "");
    CHECK_INT(o.check, 0);
    CHECK_INT(o.iters, 20);
    CHECK_INT(o.seed, 42);
    CHECK_NEAR(o.timeout, 0.5, 0);
    CHECK_INT(o.buf, 1048576);
    CHECK_STR(o.backend, "cpu");
    check_list(&o.batch, (const long long[]){1, 16}, 2);
    CHECK_INT(o.bytes.n, 0);
    CHECK(o.bytes.v == NULL);
    CHECK_INT(o.routing.n, 1);
    CHECK_STR(o.routing.v[0], "uniform");
    CHECK_INT(o.world, -1);
    CHECK(o.out == NULL);
    CHECK_INT(o.flush, 1);
    mp_opts_free(table, &o);
    CHECK(o.backend == NULL);
    CHECK(o.batch.v == NULL && o.batch.n == 0);
    CHECK(o.routing.v == NULL && o.routing.n == 0);
}

static void test_values(void)
{
    struct topts o;
    char msg[1024];
    const char *args[] = {
        "--check",
        "--iters", "100",
        "--seed=-7",
        "--timeout", "2.25",
        "--buf", "64KiB",
        "--backend=cuda",
        "--batch", "1:128:x2,200,12:36:+8,5:7",
        "--bytes", "1K,4K:16K:x2,1M:3M:+1M",
        "--routing", "zipf:1.2,hot:4:15,gate,gate:noise",
        "--world", "8",
        "--out", "a",
        "--out", "b",
        "--iters=1000000",
        NULL,
    };
    CHECK_INT(parse(&o, args, msg, sizeof msg), MP_OK);
    CHECK_STR(msg, "");
    CHECK_INT(o.check, 1);
    CHECK_INT(o.iters, 1000000); /* repeated flag: the last one wins */
    CHECK_INT(o.seed, -7);
    CHECK_NEAR(o.timeout, 2.25, 0);
    CHECK_INT(o.buf, 65536);
    CHECK_STR(o.backend, "cuda");
    check_list(&o.batch, (const long long[]){1, 2, 4, 8, 16, 32, 64, 128, 200, 12, 20, 28, 36, 5, 6,
                                             7},
               16);
    check_list(&o.bytes, (const long long[]){1024, 4096, 8192, 16384, 1048576, 2097152, 3145728},
               7);
    CHECK_INT(o.routing.n, 4);
    if (o.routing.n == 4) {
        CHECK_STR(o.routing.v[0], "zipf:1.2");
        CHECK_STR(o.routing.v[1], "hot:4:15");
        CHECK_STR(o.routing.v[2], "gate");
        CHECK_STR(o.routing.v[3], "gate:noise");
    }
    CHECK_INT(o.world, 8);
    CHECK_STR(o.out, "b");
    mp_opts_free(table, &o);
    CHECK(o.out == NULL && o.backend == NULL && o.bytes.v == NULL);
}

static void expect_error(const char *const *args, const char *want)
{
    struct topts o;
    char msg[1024], line[1024];
    CHECK_INT(parse(&o, args, msg, sizeof msg), MP_ERR_USAGE);
    /* exactly one line, naming the program */
    char *nl = strchr(msg, '\n');
    CHECK(nl && nl[1] == '\0');
    snprintf(line, sizeof line, "t: %s\n", want);
    if (want[strlen(want) - 1] == '*') { /* prefix match */
        CHECK(strncmp(msg, line, strlen(line) - 2) == 0);
        if (strncmp(msg, line, strlen(line) - 2) != 0)
            fprintf(stderr, "  got: %s  want prefix: %s", msg, line);
    } else {
        CHECK_STR(msg, line);
    }
    /* the parser released what it had allocated */
    CHECK(o.backend == NULL && o.out == NULL && o.batch.v == NULL && o.routing.v == NULL);
}

static void test_errors(void)
{
    expect_error((const char *[]){"--foo", NULL}, "unknown flag --foo (see --help)");
    expect_error((const char *[]){"--foo=3", NULL}, "unknown flag --foo (see --help)");
    expect_error((const char *[]){"-x", NULL}, "unknown flag -x (see --help)");
    /* a value twice would be two points of one key */
    expect_error((const char *[]){"--batch", "16,1:32:x2", NULL},
                 "--batch: '16,1:32:x2' gives 16 twice; give each value once");
    expect_error((const char *[]){"--routing", "gate,zipf:1.2,gate", NULL},
                 "--routing: 'gate,zipf:1.2,gate' gives gate twice; give each value once");
    expect_error((const char *[]){"--iters", "abc", NULL}, "--iters: 'abc' is not an integer");
    expect_error((const char *[]){"--iters", "12x", NULL}, "--iters: '12x' is not an integer");
    expect_error((const char *[]){"--iters", "", NULL}, "--iters: '' is not an integer");
    expect_error((const char *[]){"--iters", "0", NULL}, "--iters: 0 is out of range [1, 1000000]");
    expect_error((const char *[]){"--iters=1000001", NULL},
                 "--iters: 1000001 is out of range [1, 1000000]");
    expect_error((const char *[]){"--iters", "3000000000", NULL},
                 "--iters: 3000000000 is out of range [-2147483648, 2147483647]");
    expect_error((const char *[]){"--seed", "99999999999999999999", NULL},
                 "--seed: '99999999999999999999' is not an integer");
    expect_error((const char *[]){"--backend", "gpu", NULL},
                 "--backend: 'gpu' is not one of cpu|cuda|model");
    expect_error((const char *[]){"--backend", "cpu:", NULL},
                 "--backend: 'cpu:' is not one of cpu|cuda|model");
    expect_error((const char *[]){"--batch", NULL}, "--batch: missing value");
    expect_error((const char *[]){"--batch", "--check", NULL}, "--batch: missing value");
    expect_error((const char *[]){"--batch", "1,,2", NULL}, "--batch: empty element in '1,,2'*");
    expect_error((const char *[]){"--batch", "0,4", NULL},
                 "--batch: the 1st value of '0,4', 0, is below the minimum 1 (accepted: 1 to "
                 "65536)");
    expect_error((const char *[]){"--batch", "1:200000:x2", NULL},
                 "--batch: the 18th value of '1:200000:x2', 131072, is above the maximum 65536 "
                 "(accepted: 1 to 65536)");
    expect_error((const char *[]){"--batch", "8:1", NULL}, "--batch: range '8:1' in '8:1' is empty*");
    expect_error((const char *[]){"--bytes", "1X", NULL}, "--bytes: '1X' in '1X' is not a size*");
    expect_error((const char *[]){"--routing", "uniform,foo", NULL},
                 "--routing: 'foo' is not one of uniform|zipf:...|hot:...|lognormal:...|gate|"
                 "gate:...|trace:...");
    expect_error((const char *[]){"--routing", "uniform,", NULL},
                 "--routing: empty element in 'uniform,'*");
    expect_error((const char *[]){"--check=1", NULL}, "--check takes no value (got '1')");
    expect_error((const char *[]){"--timeout", "nan", NULL}, "--timeout: 'nan' is not a finite number");
    expect_error((const char *[]){"--timeout", "1.5s", NULL},
                 "--timeout: '1.5s' is not a finite number");
    expect_error((const char *[]){"--timeout", "4000", NULL},
                 "--timeout: 4000 is out of range [0, 3600]");
    expect_error((const char *[]){"--buf", "1.5M", NULL}, "--buf: '1.5M' is not a size*");
    expect_error((const char *[]){"--backend", "cuda", "stray", NULL},
                 "unexpected argument 'stray'*");
}

/* A flag that defaults to on: --no-NAME turns it off, --NAME on again, the last one wins; the
 * --no- form exists only for flags and takes no value either. */
static void test_negated_flag(void)
{
    struct topts o;
    char msg[1024];
    CHECK_INT(parse(&o, (const char *[]){"--no-flush-cache", NULL}, msg, sizeof msg), MP_OK);
    CHECK_STR(msg, "");
    CHECK_INT(o.flush, 0);
    mp_opts_free(table, &o);
    CHECK_INT(parse(&o, (const char *[]){"--no-flush-cache", "--flush-cache", NULL}, msg,
                    sizeof msg),
              MP_OK);
    CHECK_INT(o.flush, 1);
    mp_opts_free(table, &o);
    CHECK_INT(parse(&o, (const char *[]){"--flush-cache", "--no-flush-cache", NULL}, msg,
                    sizeof msg),
              MP_OK);
    CHECK_INT(o.flush, 0);
    mp_opts_free(table, &o);
    CHECK_INT(parse(&o, (const char *[]){"--no-check", "--check", NULL}, msg, sizeof msg), MP_OK);
    CHECK_INT(o.check, 1);
    mp_opts_free(table, &o);
    expect_error((const char *[]){"--no-flush-cache=1", NULL},
                 "--no-flush-cache takes no value (got '1')");
    expect_error((const char *[]){"--no-iters", "3", NULL}, "unknown flag --no-iters (see --help)");
    expect_error((const char *[]){"--no-", NULL}, "unknown flag --no- (see --help)");
    expect_error((const char *[]){"--no-bogus", NULL}, "unknown flag --no-bogus (see --help)");
}

static void test_size_parse(void)
{
    static const struct {
        const char *s;
        long long v;
    } good[] = {
        {"0", 0},          {"7", 7},          {"7B", 7},        {"64K", 65536},
        {"64k", 65536},    {"64KB", 65536},   {"64KiB", 65536}, {"64kib", 65536},
        {"1M", 1048576},   {"3m", 3145728},   {"2G", 2147483648LL},
        {"8GiB", 8589934592LL},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        long long v = -5;
        CHECK_INT(mp_size_parse(good[i].s, &v), 0);
        CHECK_INT(v, good[i].v);
    }
    static const char *const bad[] = {"",     "K",   "1.5K",   "-1",    "+1",  "1T", "1Ki",
                                      "1KiBx", " 1", "1 K",    "7iB",   "1KK",
                                      "9999999999999G", "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        long long v = -5;
        CHECK_INT(mp_size_parse(bad[i], &v), -1);
        CHECK_INT(v, -5);
    }
}

static void expect_list(const char *text, int sfx, const long long *want, int n)
{
    struct mp_list l;
    CHECK_INT(mp_list_parse(text, sfx, "--l", &l), MP_OK);
    check_list(&l, want, n);
    mp_list_free(&l);
    CHECK(l.v == NULL && l.n == 0);
}

static void test_list_parse(void)
{
    expect_list("3:100:x3", 0, (const long long[]){3, 9, 27, 81}, 4);
    expect_list("5:5", 0, (const long long[]){5}, 1);
    expect_list("-2:1", 0, (const long long[]){-2, -1, 0, 1}, 4);
    expect_list("1:10:+4", 0, (const long long[]){1, 5, 9}, 3);
    expect_list("1:8:X2", 0, (const long long[]){1, 2, 4, 8}, 4);
    expect_list("16,1", 0, (const long long[]){16, 1}, 2);
    expect_list("1K:4K:+1K,2M", 1, (const long long[]){1024, 2048, 3072, 4096, 2097152}, 5);
    /* no overflow near the top of the range */
    expect_list("4611686018427387904:9223372036854775807:x2", 0,
                (const long long[]){4611686018427387904LL}, 1);
    expect_list("9223372036854775800:9223372036854775807:+5", 0,
                (const long long[]){9223372036854775800LL, 9223372036854775805LL}, 2);

    struct mp_list l;
    CHECK_INT(mp_list_parse("1:4096", 0, "--l", &l), MP_OK);
    CHECK_INT(l.n, 4096);
    if (l.n == 4096)
        CHECK_INT(l.v[4095], 4096);
    mp_list_free(&l);

    static const char *const bad[] = {"",      "1,,2",  ",1",    "1,",      "4:1",    "1:8:y",
                                      "1:8:x1", "1:8:+0", "0:8:x2", "1:2:3:4", "a",      "1:",
                                      "1:5000", "1K",    "1:8:x",  "1:8:+",   "1:8:x1.5"};
    struct capture c;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        l.n = 7;
        capture_begin(&c, 2);
        int rc = mp_list_parse(bad[i], 0, "--l", &l);
        const char *msg = capture_end(&c);
        CHECK_INT(rc, MP_ERR_USAGE);
        CHECK(strncmp(msg, "t: --l: ", 8) == 0);
        CHECK(l.n == 0 && l.v == NULL);
    }
}

static void test_positional(void)
{
    struct topts o;
    char *argv[] = {"t", "a", "--iters", "3", "b", "--", "--c", NULL};
    char **pos = NULL;
    int npos = -1;
    CHECK_INT(mp_opts_parse(table, &o, 7, argv, NULL, &pos, &npos), MP_OK);
    CHECK_INT(o.iters, 3);
    CHECK_INT(npos, 3);
    if (pos && npos == 3) {
        CHECK_STR(pos[0], "a");
        CHECK_STR(pos[1], "b");
        CHECK_STR(pos[2], "--c");
        CHECK(pos[3] == NULL);
    }
    free(pos);
    mp_opts_free(table, &o);
}

static void test_help(void)
{
    struct topts o;
    struct capture c;
    char *argv[] = {"t", "--iters", "5", "--help", "--bogus", NULL};
    capture_begin(&c, 1);
    int rc = mp_opts_parse(table, &o, 5, argv, "a test program", NULL, NULL);
    const char *out = capture_end(&c);
    CHECK_INT(rc, MP_HELP);
    const char *head = "usage: t [options]\na test program\n";
    CHECK(strncmp(out, head, strlen(head)) == 0);
    CHECK(strstr(out, "  --iters N ") != NULL);
    CHECK(strstr(out, "timed iterations [default: 20] [range: 1..1000000]") != NULL);
    CHECK(strstr(out, "  --backend NAME ") != NULL);
    CHECK(strstr(out, "[one of: cpu|cuda|model]") != NULL);
    CHECK(strstr(out, "zipf:...") != NULL);
    CHECK(strstr(out, "  --check ") != NULL);
    CHECK(strstr(out, "evict caches [default: on; --no-flush-cache turns it off]") != NULL);
    CHECK(strstr(out, "--help") != NULL && strstr(out, "--version") != NULL);
    for (const struct mp_opt *t = table; t->name; t++) {
        char want[64];
        snprintf(want, sizeof want, "  --%s", t->name);
        CHECK(strstr(out, want) != NULL);
    }
    for (const char *p = out; *p;) { /* every line fits the wrap width */
        size_t len = strcspn(p, "\n");
        CHECK(len <= 100);
        p += len + (p[len] == '\n');
    }
    CHECK(o.backend == NULL);

    char *argv2[] = {"t", "-h", NULL};
    capture_begin(&c, 1);
    CHECK_INT(mp_opts_parse(table, &o, 2, argv2, NULL, NULL, NULL), MP_HELP);
    CHECK(strncmp(capture_end(&c), head, 19) == 0);

    char *argv3[] = {"t", "--version", NULL};
    capture_begin(&c, 1);
    CHECK_INT(mp_opts_parse(table, &o, 2, argv3, NULL, NULL, NULL), MP_HELP);
    CHECK_STR(capture_end(&c), "t " MOEPERF_VERSION " (" MOEPERF_GIT_REV ")\n");
}

int main(void)
{
    mp_log_init("t", -1);
    test_defaults();
    test_values();
    test_errors();
    test_negated_flag();
    test_size_parse();
    test_list_parse();
    test_positional();
    test_help();
    CHECK_DONE();
}
