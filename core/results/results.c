/* results.c - CSV rows written whole and flushed, resume and filtering of cut runs, a CSV reader,
 * directory creation and run.json. */
#include "results.h"

#include "clock.h"
#include "config.h"
#include "error.h"
#include "files.h"
#include "git_rev.h"
#include "sort.h"
#include "topo.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

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

/* Length of the first `nkey` cells of CSV text `s` (len bytes): up to the nkey-th comma outside
 * quotes, or all of it. */
static size_t key_len(const char *s, size_t len, int nkey)
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
    size_t n = key_len(s, r->len, nkey);
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

/* Check an existing results file for --resume: the header must be `header` and a partial last line
 * is cut away. *fresh is set when the file holds no complete line and should be rewritten. */
static int csv_resume_check(const char *path, const char *header, int *fresh)
{
    int fd = open(path, O_RDWR);
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
    if (keep < st.st_size && ftruncate(fd, keep) != 0) {
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
            MP_CHECK(csv_resume_check(c->path, header, &fresh));
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

/* ---- reading ---- */

/* Split one line (no newline) into cells, removing RFC 4180 quotes. Returns the cell count, or -1
 * when out of memory; *out receives a heap array of heap strings. */
static int split_line(const char *s, size_t len, char ***out)
{
    int n = 0, cap = 8;
    char **cells = malloc((size_t)cap * sizeof *cells);
    char *cell = malloc(len + 1);
    if (!cells || !cell)
        goto oom;
    size_t i = 0;
    for (;;) {
        size_t w = 0;
        if (i < len && s[i] == '"') {
            i++;
            while (i < len) {
                if (s[i] == '"') {
                    if (i + 1 < len && s[i + 1] == '"') {
                        cell[w++] = '"';
                        i += 2;
                        continue;
                    }
                    i++;
                    break;
                }
                cell[w++] = s[i++];
            }
        }
        /* unquoted text, or anything after a closing quote, up to the next comma */
        while (i < len && s[i] != ',')
            cell[w++] = s[i++];
        cell[w] = '\0';
        if (n == cap) {
            cap *= 2;
            char **nc = realloc(cells, (size_t)cap * sizeof *cells);
            if (!nc)
                goto oom;
            cells = nc;
        }
        if (!(cells[n] = strdup(cell)))
            goto oom;
        n++;
        if (i >= len)
            break;
        i++; /* the comma */
    }
    free(cell);
    *out = cells;
    return n;
oom:
    if (cells)
        for (int k = 0; k < n; k++)
            free(cells[k]);
    free(cells);
    free(cell);
    return -1;
}

static void free_cells(char **cells, int n)
{
    if (!cells)
        return;
    for (int i = 0; i < n; i++)
        free(cells[i]);
    free(cells);
}

int mp_table_read(const char *path, struct mp_table *t)
{
    memset(t, 0, sizeof *t);
    size_t len = 0;
    int rc = MP_OK;
    long cap = 0;
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        mp_usage("%s: %s", path, strerror(EISDIR));
        return MP_ERR_USAGE;
    }
    char *text = mp_read_file(path, &len);
    if (!text) {
        mp_usage("%s: %s", path, strerror(errno));
        return MP_ERR_USAGE;
    }
    t->path = strdup(path);
    if (!t->path)
        goto oom;
    long lineno = 0;
    for (size_t pos = 0; pos < len;) {
        char *nl = memchr(text + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - text) : len;
        const char *line = text + pos;
        size_t ll = end - pos;
        int complete = nl != NULL;
        pos = nl ? end + 1 : len;
        lineno++;
        if (ll > 0 && line[ll - 1] == '\r')
            ll--;
        if (ll == 0 || line[0] == '#')
            continue;
        char **cells;
        int n = split_line(line, ll, &cells);
        if (n < 0)
            goto oom;
        if (!t->cols) {
            t->cols = cells;
            t->ncols = n;
            continue;
        }
        if (n != t->ncols) {
            free_cells(cells, n);
            if (!complete) /* a row cut by a kill */
                break;
            mp_usage("%s line %ld: %d cells, header has %d", path, lineno, n, t->ncols);
            rc = MP_ERR_USAGE;
            goto fail;
        }
        if (t->nrows == cap) {
            long nc = cap ? cap * 2 : 64;
            char ***r = realloc(t->cells, (size_t)nc * sizeof *r);
            if (!r) {
                free_cells(cells, n);
                goto oom;
            }
            t->cells = r;
            cap = nc;
        }
        t->cells[t->nrows++] = cells;
    }
    if (!t->cols) {
        mp_usage("%s: no header line", path);
        rc = MP_ERR_USAGE;
        goto fail;
    }
    free(text);
    return MP_OK;
oom:
    mp_error("%s: out of memory", path);
    rc = MP_ERR_RUNTIME;
fail:
    free(text);
    mp_table_free(t);
    return rc;
}

void mp_table_free(struct mp_table *t)
{
    for (long i = 0; i < t->nrows; i++)
        free_cells(t->cells[i], t->ncols);
    free(t->cells);
    free_cells(t->cols, t->ncols);
    free(t->path);
    memset(t, 0, sizeof *t);
}

int mp_table_col(const struct mp_table *t, const char *name)
{
    for (int i = 0; i < t->ncols; i++)
        if (strcmp(t->cols[i], name) == 0)
            return i;
    return -1;
}

char *mp_table_key(const struct mp_table *t, long i, int nkey)
{
    /* re-encode the cells exactly as mp_row_str writes them */
    struct mp_row r = {NULL, 0, 0, 0};
    if (nkey > t->ncols)
        nkey = t->ncols;
    for (int k = 0; k < nkey; k++)
        mp_row_str(&r, t->cells[i][k]);
    char *key = mp_row_key(&r, nkey);
    mp_row_free(&r);
    return key;
}

/* ---- key sets: kept sorted, so lookups are binary searches ---- */

static const char *keyset_key(long i, const void *ks)
{
    return ((const struct mp_keyset *)ks)->keys[i];
}

/* Index of `key` in ks, or -(insertion point) - 1. */
static long keyset_find(const struct mp_keyset *ks, const char *key)
{
    return mp_find_sorted(key, ks->n, keyset_key, ks);
}

/* Insert a copy of `key` unless present. The array grows in powers of two (capacity is implied by
 * n). Returns MP_OK or MP_ERR_RUNTIME (out of memory). */
static int keyset_insert(struct mp_keyset *ks, const char *key)
{
    long at = keyset_find(ks, key);
    if (at >= 0)
        return MP_OK;
    at = -at - 1;
    if (ks->n == 0 || (ks->n >= 8 && (ks->n & (ks->n - 1)) == 0)) {
        long cap = ks->n < 8 ? 8 : ks->n * 2;
        char **k = realloc(ks->keys, (size_t)cap * sizeof *k);
        if (!k)
            return MP_ERR_RUNTIME;
        ks->keys = k;
    }
    char *dup = strdup(key);
    if (!dup)
        return MP_ERR_RUNTIME;
    memmove(ks->keys + at + 1, ks->keys + at, (size_t)(ks->n - at) * sizeof *ks->keys);
    ks->keys[at] = dup;
    ks->n++;
    return MP_OK;
}

int mp_keyset_has(const struct mp_keyset *ks, const char *key)
{
    return ks && key && keyset_find(ks, key) >= 0;
}

void mp_keyset_add(struct mp_keyset *ks, const char *key)
{
    if (!key)
        return;
    if (keyset_insert(ks, key) != MP_OK) {
        mp_error("out of memory");
        abort();
    }
}

void mp_keyset_free(struct mp_keyset *ks)
{
    for (long i = 0; i < ks->n; i++)
        free(ks->keys[i]);
    free(ks->keys);
    ks->keys = NULL;
    ks->n = 0;
}

int mp_keyset_load(const char *dir, const char *name, int nkey, struct mp_keyset *ks)
{
    struct mp_table t;
    struct stat st;
    int rc = MP_OK;
    ks->n = 0;
    ks->keys = NULL;
    char *path = mp_path_join(dir, name);
    if (!path) {
        mp_error("out of memory");
        return MP_ERR_RUNTIME;
    }
    if (stat(path, &st) != 0) {
        if (errno == ENOENT) {
            free(path);
            return MP_OK;
        }
    } else if (S_ISREG(st.st_mode) && st.st_size == 0) {
        free(path);
        return MP_OK;
    }
    rc = mp_table_read(path, &t);
    free(path);
    if (rc != MP_OK)
        return rc;
    for (long i = 0; i < t.nrows && rc == MP_OK; i++) {
        char *k = mp_table_key(&t, i, nkey);
        if (!k || keyset_insert(ks, k) != MP_OK) {
            mp_error("%s: out of memory", t.path);
            rc = MP_ERR_RUNTIME;
        }
        free(k);
    }
    mp_table_free(&t);
    if (rc != MP_OK)
        mp_keyset_free(ks);
    return rc;
}

/* Cells in CSV text `s` of `len` bytes: unquoted commas + 1. */
static int count_cells(const char *s, size_t len)
{
    int n = 1, inq = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == '"')
            inq = !inq;
        else if (s[i] == ',' && !inq)
            n++;
    }
    return n;
}

int mp_csv_filter(const char *dir, const char *name, int nkey, const struct mp_keyset *keep)
{
    int rc = MP_OK, fd = -1;
    FILE *in = NULL, *out = NULL;
    char *path = mp_path_join(dir, name), *tmp = NULL, *line = NULL;
    size_t cap = 0;
    if (!path)
        goto oom;
    in = fopen(path, "r");
    if (!in) {
        if (errno == ENOENT)
            goto done;
        mp_usage("%s: %s", path, strerror(errno));
        rc = MP_ERR_USAGE;
        goto done;
    }
    struct stat st;
    int serr = fstat(fileno(in), &st) != 0 ? errno : S_ISDIR(st.st_mode) ? EISDIR : 0;
    if (serr) {
        mp_usage("%s: %s", path, strerror(serr));
        rc = MP_ERR_USAGE;
        goto done;
    }
    size_t dl = strlen(dir);
    tmp = malloc(dl + strlen(name) + 16);
    if (!tmp)
        goto oom;
    sprintf(tmp, "%s%s.%s.XXXXXX", dir, dl && dir[dl - 1] != '/' ? "/" : "", name);
    fd = mkstemp(tmp);
    if (fd < 0 || !(out = fdopen(fd, "w"))) {
        mp_usage("%s: cannot create a temporary file: %s", tmp, strerror(errno));
        rc = MP_ERR_USAGE;
        if (fd >= 0)
            close(fd);
        fd = -1;
        free(tmp);
        tmp = NULL;
        goto done;
    }
    fd = -1; /* owned by out */
    fchmod(fileno(out), st.st_mode & 07777);

    int ncols = 0;
    long lineno = 0;
    ssize_t got;
    while ((got = getline(&line, &cap, in)) > 0) {
        size_t ll = (size_t)got;
        int complete = line[ll - 1] == '\n';
        lineno++;
        if (complete)
            ll--;
        size_t body = ll > 0 && line[ll - 1] == '\r' ? ll - 1 : ll;
        if (body == 0)
            continue;
        int keepit;
        if (line[0] == '#') {
            keepit = 1; /* comments stay */
        } else if (ncols == 0) {
            ncols = count_cells(line, body);
            keepit = 1;
        } else {
            int n = count_cells(line, body);
            if (n != ncols) {
                if (!complete)
                    break; /* a row cut by a kill */
                mp_usage("%s line %ld: %d cells, header has %d", path, lineno, n, ncols);
                rc = MP_ERR_USAGE;
                goto done;
            }
            size_t kl = key_len(line, body, nkey);
            char saved = line[kl];
            line[kl] = '\0';
            keepit = mp_keyset_has(keep, line);
            line[kl] = saved;
        }
        if (keepit && (fwrite(line, 1, ll, out) != ll || fputc('\n', out) == EOF)) {
            mp_error("%s: write failed: %s", tmp, strerror(errno));
            rc = MP_ERR_RUNTIME;
            goto done;
        }
    }
    if (ferror(in)) {
        mp_error("%s: read failed: %s", path, strerror(errno));
        rc = MP_ERR_RUNTIME;
        goto done;
    }
    if (fflush(out) != 0 || fsync(fileno(out)) != 0) {
        mp_error("%s: write failed: %s", tmp, strerror(errno));
        rc = MP_ERR_RUNTIME;
        goto done;
    }
    int ce = fclose(out);
    out = NULL;
    if (ce != 0 || rename(tmp, path) != 0) {
        mp_error("%s: cannot replace with %s: %s", path, tmp, strerror(errno));
        rc = MP_ERR_RUNTIME;
        goto done;
    }
    free(tmp);
    tmp = NULL;
    goto done;
oom:
    mp_error("out of memory");
    rc = MP_ERR_RUNTIME;
done:
    if (out)
        fclose(out);
    if (tmp) {
        unlink(tmp);
        free(tmp);
    }
    if (in)
        fclose(in);
    free(line);
    free(path);
    return rc;
}

/* ---- run directory ---- */

int mp_mkdir_p(const char *path, const char *flag)
{
    const char *who = flag ? flag : "directory";
    int err = 0;
    size_t n = strlen(path);
    if (n == 0) {
        mp_usage("%s: cannot create directory '': %s", who, strerror(ENOENT));
        return MP_ERR_USAGE;
    }
    char *p = strdup(path);
    if (!p) {
        mp_error("out of memory");
        return MP_ERR_RUNTIME;
    }
    /* visit each prefix ending before a '/' and then the whole path */
    for (size_t i = 1; i <= n && !err; i++) {
        if (i < n && p[i] != '/')
            continue;
        if (i < n && p[i - 1] == '/')
            continue; /* repeated slashes */
        char c = p[i];
        p[i] = '\0';
        struct stat st;
        if (stat(p, &st) == 0) {
            if (!S_ISDIR(st.st_mode))
                err = ENOTDIR;
        } else if (errno != ENOENT) {
            err = errno;
        } else if (mkdir(p, 0755) != 0) {
            if (errno != EEXIST || stat(p, &st) != 0 || !S_ISDIR(st.st_mode))
                err = errno == EEXIST ? ENOTDIR : errno;
        }
        p[i] = c;
    }
    free(p);
    if (!err && access(path, W_OK | X_OK) != 0)
        err = errno;
    if (err) {
        mp_usage("%s: cannot create directory '%s': %s", who, path, strerror(err));
        return MP_ERR_USAGE;
    }
    return MP_OK;
}

/* ---- run.json ---- */

static void iso_now(char *buf, size_t n)
{
    time_t now = time(NULL);
    struct tm tm;
    if (!gmtime_r(&now, &tm) || strftime(buf, n, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
        snprintf(buf, n, "unknown");
}

/* The environment prefixes that change how the communication and math libraries behave. */
static const char *const env_prefixes[] = {"NCCL_",     "UCX_",  "OMPI_",
                                            "OPENBLAS_", "CUDA_", "SLURM_"};

struct cJSON *mp_runjson_new(const char *tool, int argc, char **argv)
{
    char buf[256];
    cJSON *j = cJSON_CreateObject();
    if (!j)
        goto oom;
    cJSON *build = cJSON_CreateObject(), *args = cJSON_CreateArray(), *env = cJSON_CreateObject();
    if (!build || !args || !env) {
        cJSON_Delete(build);
        cJSON_Delete(args);
        cJSON_Delete(env);
        goto oom;
    }
    cJSON_AddItemToObject(j, "tool", cJSON_CreateString(tool ? tool : ""));
    cJSON_AddItemToObject(j, "version", cJSON_CreateString(MOEPERF_VERSION));
    cJSON_AddItemToObject(j, "git_revision", cJSON_CreateString(MOEPERF_GIT_REV));
    cJSON_AddItemToObject(build, "type", cJSON_CreateString(MOEPERF_BUILDTYPE));
    cJSON_AddItemToObject(build, "compiler", cJSON_CreateString(MOEPERF_COMPILER));
    cJSON_AddItemToObject(build, "features", cJSON_CreateString(MOEPERF_FEATURES));
    cJSON_AddItemToObject(j, "build", build);
    for (int i = 0; i < argc; i++)
        cJSON_AddItemToArray(args, cJSON_CreateString(argv[i] ? argv[i] : ""));
    cJSON_AddItemToObject(j, "argv", args);
    iso_now(buf, sizeof buf);
    cJSON_AddItemToObject(j, "start", cJSON_CreateString(buf));
    if (gethostname(buf, sizeof buf - 1) != 0)
        snprintf(buf, sizeof buf, "unknown");
    buf[sizeof buf - 1] = '\0';
    cJSON_AddItemToObject(j, "host", cJSON_CreateString(buf));
    cJSON_AddItemToObject(j, "timer", cJSON_CreateString(MP_CLOCK_NAME));
    for (char **e = environ; e && *e; e++) {
        const char *eq = strchr(*e, '=');
        if (!eq)
            continue;
        for (size_t k = 0; k < sizeof env_prefixes / sizeof env_prefixes[0]; k++) {
            if (strncmp(*e, env_prefixes[k], strlen(env_prefixes[k])) != 0)
                continue;
            size_t nl = (size_t)(eq - *e);
            char *name = malloc(nl + 1);
            if (!name) {
                cJSON_Delete(env);
                cJSON_Delete(j);
                goto oom;
            }
            memcpy(name, *e, nl);
            name[nl] = '\0';
            cJSON_AddItemToObject(env, name, cJSON_CreateString(eq + 1));
            free(name);
            break;
        }
    }
    cJSON_AddItemToObject(j, "env", env);
    cJSON *topo = mp_topo_summary();
    cJSON_AddItemToObject(j, "topology", topo ? topo : cJSON_CreateNull());
    return j;
oom:
    cJSON_Delete(j);
    mp_error("out of memory building run.json");
    return NULL;
}

int mp_json_write(const struct cJSON *j, const char *dir, const char *name)
{
    int rc = MP_OK;
    char *text = cJSON_Print(j), *tmpname = NULL;
    char *tmp = NULL, *path = mp_path_join(dir, name);
    if (text && path && (tmpname = malloc(strlen(name) + 6)))
        sprintf(tmpname, ".%s.tmp", name);
    if (tmpname)
        tmp = mp_path_join(dir, tmpname);
    FILE *f = NULL;
    if (!text || !tmp || !path) {
        mp_error("out of memory writing %s", name);
        rc = MP_ERR_RUNTIME;
        goto out;
    }
    f = fopen(tmp, "w");
    if (!f) {
        mp_error("%s: %s", tmp, strerror(errno));
        rc = MP_ERR_RUNTIME;
        goto out;
    }
    size_t n = strlen(text);
    int bad = fwrite(text, 1, n, f) != n || fputc('\n', f) == EOF || fflush(f) != 0;
    bad |= fclose(f) != 0;
    f = NULL;
    if (bad) {
        mp_error("%s: write failed: %s", tmp, strerror(errno));
        unlink(tmp);
        rc = MP_ERR_RUNTIME;
        goto out;
    }
    if (rename(tmp, path) != 0) {
        mp_error("%s: cannot rename to %s: %s", tmp, path, strerror(errno));
        unlink(tmp);
        rc = MP_ERR_RUNTIME;
    }
out:
    cJSON_free(text);
    free(tmpname);
    free(tmp);
    free(path);
    return rc;
}

int mp_runjson_write(struct cJSON *j, const char *dir, int finished)
{
    char now[64];
    if (!j) {
        mp_error("run.json: nothing to write");
        return MP_ERR_RUNTIME;
    }
    iso_now(now, sizeof now);
    cJSON_DeleteItemFromObjectCaseSensitive(j, "end");
    cJSON_DeleteItemFromObjectCaseSensitive(j, "finished");
    cJSON_AddItemToObject(j, "end", cJSON_CreateString(now));
    cJSON_AddItemToObject(j, "finished", cJSON_CreateBool(finished));
    return mp_json_write(j, dir, "run.json");
}
