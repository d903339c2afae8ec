/* csv_read.c - a CSV reader (whole tables, cells unquoted) and sorted key sets of the rows a cut
 * run already holds (results.h). */
#include "results.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "error.h"
#include "files.h"
#include "sort.h"

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
            if (r)
                t->cells = r;
            long *l = r ? realloc(t->line, (size_t)nc * sizeof *l) : NULL;
            if (!l) {
                free_cells(cells, n);
                goto oom;
            }
            t->line = l;
            cap = nc;
        }
        t->line[t->nrows] = lineno;
        t->cells[t->nrows++] = cells;
    }
    if (!t->cols) {
        mp_usage("%s: no header line", path);
        rc = MP_ERR_USAGE;
        goto fail;
    }
    free(text);
    if ((rc = mp_table_validate(t, NULL)) != MP_OK)
        mp_table_free(t);
    return rc;
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
    free(t->line);
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
