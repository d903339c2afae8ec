/* results.c - CSV rows written whole and flushed, and a cut run's files resumed (the reader:
 * csv_read.c; filtering: csv_filter.c; run directories and run.json: rundir.c). */
#include "results.h"

#include "error.h"
#include "files.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

/* ---- rows ---- */

/* Make room for `extra` more bytes plus the terminating NUL. A failed allocation marks the row
 * broken (ncells = -1) until the next reset; mp_csv_write then refuses it. */
static int row_reserve(struct mp_row *r, size_t extra)
{
    if (r->ncells < 0)
        return -1;
    if (r->len + extra + 1 <= r->cap)
        return 0;
    size_t cap = r->cap ? r->cap : 256;
    while (cap < r->len + extra + 1)
        cap *= 2;
    char *b = realloc(r->buf, cap);
    if (!b) {
        r->ncells = -1;
        return -1;
    }
    r->buf = b;
    r->cap = cap;
    return 0;
}

void mp_row_reset(struct mp_row *r)
{
    r->len = 0;
    r->ncells = 0;
    if (r->buf)
        r->buf[0] = '\0';
}

void mp_row_free(struct mp_row *r)
{
    free(r->buf);
    r->buf = NULL;
    r->len = r->cap = 0;
    r->ncells = 0;
}

/* Append one cell's text (already encoded) with its separator. */
static void row_cell(struct mp_row *r, const char *text, size_t n)
{
    if (row_reserve(r, n + 1) != 0)
        return;
    if (r->ncells > 0)
        r->buf[r->len++] = ',';
    memcpy(r->buf + r->len, text, n);
    r->len += n;
    r->buf[r->len] = '\0';
    r->ncells++;
}

static int needs_quotes(const char *s) { return s[strcspn(s, ",\"\r\n")] != '\0'; }

/* Append `s` as one cell, quoted per RFC 4180 when it holds a comma, a quote, CR or LF. */
void mp_row_str(struct mp_row *r, const char *s)
{
    if (!s)
        s = "";
    if (!needs_quotes(s)) {
        row_cell(r, s, strlen(s));
        return;
    }
    size_t n = strlen(s), q = 0;
    for (size_t i = 0; i < n; i++)
        q += s[i] == '"';
    if (row_reserve(r, n + q + 3) != 0)
        return;
    if (r->ncells > 0)
        r->buf[r->len++] = ',';
    r->buf[r->len++] = '"';
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '"')
            r->buf[r->len++] = '"';
        r->buf[r->len++] = s[i];
    }
    r->buf[r->len++] = '"';
    r->buf[r->len] = '\0';
    r->ncells++;
}

/* The decimal digits of v into t (at least 24 bytes), as %lld prints them; returns their count. */
static int format_ll(char *t, long long v)
{
    char d[24];
    int n = 0, len = 0;
    unsigned long long u = v < 0 ? 0 - (unsigned long long)v : (unsigned long long)v;
    do {
        d[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        t[len++] = '-';
    while (n)
        t[len++] = d[--n];
    t[len] = '\0';
    return len;
}

void mp_row_int(struct mp_row *r, long long v)
{
    char t[32];
    int n = format_ll(t, v);
    row_cell(r, t, (size_t)n);
}

void mp_row_dbl(struct mp_row *r, double v)
{
    char t[64];
    int n;
    if (isnan(v)) {
        row_cell(r, "", 0);
        return;
    }
    if (v == 0) { /* also -0 */
        row_cell(r, "0", 1);
        return;
    }
    if (fabs(v) < 1e15 && v == (double)(long long)v) { /* a whole number: what either form below
                                                         * prints, without printf's big numbers */
        n = format_ll(t, (long long)v);
        row_cell(r, t, (size_t)n);
        return;
    }
    n = snprintf(t, sizeof t, "%.6g", v);
    /* %.6g switches to an exponent from 1e6 up; in [1e-3, 1e15) print fixed point instead. Below
     * 1e6 %.6g never uses an exponent here, so the fixed form only ever needs 0 decimals. */
    if (strchr(t, 'e') && fabs(v) >= 1e-3 && fabs(v) < 1e15)
        n = snprintf(t, sizeof t, "%.0f", v);
    row_cell(r, t, (size_t)n);
}

size_t mp_csv_key_len(const char *s, size_t len, int nkey)
{
    int inq = 0, seen = 0;
    if (nkey <= 0)
        return 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == '"')
            inq = !inq;
        else if (s[i] == ',' && !inq && ++seen == nkey)
            return i;
    }
    return len;
}

char *mp_row_key(const struct mp_row *r, int nkey)
{
    if (r->ncells < 0)
        return NULL;
    const char *s = r->buf ? r->buf : "";
    size_t n = mp_csv_key_len(s, r->len, nkey);
    char *k = malloc(n + 1);
    if (!k)
        return NULL;
    memcpy(k, s, n);
    k[n] = '\0';
    return k;
}

/* ---- writing files ---- */

/* Offset just past the last '\n' of the open file `fd` of `size` bytes (0 when there is none). */
static off_t last_newline_end(int fd, off_t size)
{
    char buf[4096];
    off_t end = size;
    while (end > 0) {
        off_t start = end > (off_t)sizeof buf ? end - (off_t)sizeof buf : 0;
        ssize_t got = pread(fd, buf, (size_t)(end - start), start);
        if (got != end - start)
            return -1;
        for (ssize_t i = got - 1; i >= 0; i--)
            if (buf[i] == '\n')
                return start + i + 1;
        end = start;
    }
    return 0;
}

/* Check an existing results file for --resume: the header must be `header` and, with `cut`, a
 * partial last line is cut away (without, the file is only read). *fresh is set when the file
 * holds no complete line and should be rewritten. */
static int csv_resume_check(const char *path, const char *header, int *fresh, int cut)
{
    int fd = open(path, cut ? O_RDWR : O_RDONLY);
    if (fd < 0) {
        mp_usage("%s: %s", path, strerror(errno));
        return MP_ERR_USAGE;
    }
    int rc = MP_OK;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        mp_usage("%s: %s", path, strerror(errno));
        rc = MP_ERR_USAGE;
        goto out;
    }
    off_t keep = last_newline_end(fd, st.st_size);
    if (keep < 0) {
        mp_error("%s: read failed: %s", path, errno ? strerror(errno) : "short read");
        rc = MP_ERR_RUNTIME;
        goto out;
    }
    if (keep == 0) { /* not even a whole header */
        *fresh = 1;
        goto out;
    }
    size_t hl = strlen(header);
    char *first = malloc(hl + 2);
    if (!first) {
        mp_error("out of memory");
        rc = MP_ERR_RUNTIME;
        goto out;
    }
    ssize_t got = pread(fd, first, hl + 1, 0);
    int same = got == (ssize_t)(hl + 1) && memcmp(first, header, hl) == 0 && first[hl] == '\n';
    free(first);
    if (!same) {
        mp_usage("%s: header differs from this tool's columns; use a new --out or drop --resume",
                 path);
        rc = MP_ERR_USAGE;
        goto out;
    }
    if (cut && keep < st.st_size && ftruncate(fd, keep) != 0) {
        mp_error("%s: cannot cut the partial last line: %s", path, strerror(errno));
        rc = MP_ERR_RUNTIME;
    }
out:
    close(fd);
    return rc;
}

int mp_csv_open(struct mp_csv *c, const char *dir, const char *name, const char *const *cols,
                int ncols, int resume)
{
    struct mp_row hdr = {NULL, 0, 0, 0};
    int rc = MP_OK, fresh = 1;
    c->f = NULL;
    c->ncols = ncols;
    c->path = mp_path_join(dir, name);
    for (int i = 0; i < ncols; i++)
        mp_row_str(&hdr, cols[i]);
    if (ncols <= 0) {
        mp_error("%s: no columns", c->path ? c->path : name);
        rc = MP_ERR_RUNTIME;
        goto out;
    }
    if (!c->path || hdr.ncells != ncols) {
        mp_error("out of memory");
        rc = MP_ERR_RUNTIME;
        goto out;
    }
    const char *header = hdr.buf ? hdr.buf : "";

    struct stat st;
    if (stat(c->path, &st) == 0) {
        if (S_ISDIR(st.st_mode)) {
            mp_usage("%s: %s", c->path, strerror(EISDIR));
            rc = MP_ERR_USAGE;
            goto out;
        }
        if (resume && st.st_size > 0) {
            fresh = 0;
            MP_CHECK(csv_resume_check(c->path, header, &fresh, 1));
        }
    }
    c->f = fopen(c->path, fresh ? "w" : "a");
    if (!c->f) {
        mp_usage("%s: %s", c->path, strerror(errno));
        rc = MP_ERR_USAGE;
        goto out;
    }
    if (fresh) {
        size_t hl = strlen(header);
        /* the header goes out in one write, like every row */
        hdr.buf[hl] = '\n';
        if (fwrite(hdr.buf, 1, hl + 1, c->f) != hl + 1 || fflush(c->f) != 0) {
            mp_error("%s: cannot write the header: %s", c->path, strerror(errno));
            rc = MP_ERR_RUNTIME;
            goto out;
        }
    }
out:
    mp_row_free(&hdr);
    if (rc != MP_OK)
        mp_csv_close(c);
    return rc;
}

int mp_csv_resume_ok(const char *dir, const char *name, const char *const *cols, int ncols)
{
    struct mp_row hdr = {NULL, 0, 0, 0};
    char *path = mp_path_join(dir, name);
    for (int i = 0; i < ncols; i++)
        mp_row_str(&hdr, cols[i]);
    int rc = MP_OK, fresh = 0;
    struct stat st;
    if (!path || hdr.ncells != ncols || ncols <= 0) {
        mp_error("out of memory");
        rc = MP_ERR_RUNTIME;
    } else if (stat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
        rc = csv_resume_check(path, hdr.buf ? hdr.buf : "", &fresh, 0);
    } else if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        mp_usage("%s: %s", path, strerror(EISDIR));
        rc = MP_ERR_USAGE;
    }
    mp_row_free(&hdr);
    free(path);
    return rc;
}

int mp_csv_write(struct mp_csv *c, const struct mp_row *r)
{
    if (!c->f) {
        mp_error("%s: results file is not open", c->path ? c->path : "(csv)");
        return MP_ERR_RUNTIME;
    }
    if (r->ncells < 0) {
        mp_error("%s: row could not be built: out of memory", c->path);
        return MP_ERR_RUNTIME;
    }
    if (r->ncells != c->ncols) {
        mp_error("%s: row has %d cells, header has %d", c->path, r->ncells, c->ncols);
        return MP_ERR_RUNTIME;
    }
    char *line = malloc(r->len + 1);
    if (!line) {
        mp_error("%s: out of memory", c->path);
        return MP_ERR_RUNTIME;
    }
    if (r->len)
        memcpy(line, r->buf, r->len);
    line[r->len] = '\n';
    size_t put = fwrite(line, 1, r->len + 1, c->f);
    free(line);
    if (put != r->len + 1 || fflush(c->f) != 0) {
        mp_error("%s: write failed: %s", c->path, strerror(errno));
        return MP_ERR_RUNTIME;
    }
    return MP_OK;
}

void mp_csv_close(struct mp_csv *c)
{
    if (c->f && fclose(c->f) != 0)
        mp_error("%s: close failed: %s", c->path ? c->path : "(csv)", strerror(errno));
    c->f = NULL;
    free(c->path);
    c->path = NULL;
}
