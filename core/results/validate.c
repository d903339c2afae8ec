/* validate.c - every result file a tool reads is checked against the schema before any of it is
 * used: numbers whole and finite, each column within its range, no point given twice (results.h,
 * mp_table_validate; docs/CSV.md, "What a reader refuses"). */
#include "results.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "schema.h"

/* The range of a number column: [lo, hi]; `what` says why, for the refusal. */
struct range {
    double lo, hi;
    const char *what;
};

/* Columns whose range their unit does not tell: shares and flags, and sizes a point cannot have at
 * zero. Every other number with a unit (µs, bytes, GB/s, tokens, count, ...) is at least 0. */
static const struct {
    const char *name;
    struct range r;
} named_ranges[] = {
    {"bubble_ratio", {0, 1, "a share of the layer time"}},
    {"wait_ratio", {0, 1, "a share of the layer time"}},
    {"local_hit_rate", {0, 1, "a share of the token-expert pairs"}},
    {"drop_rate", {0, 1, "a share of the token-expert pairs"}},
    {"cache_hit_rate", {0, 1, "a share of the expert accesses"}},
    {"fits", {0, 1, "a flag"}},
    {"meets_slo", {0, 1, "a flag"}},
    {"noisy", {0, 1, "a flag"}},
    {"gated", {0, 1, "a flag"}},
    {"flush_cache", {0, 1, "a flag"}},
    {"micro_batches", {1, 2, "1 or 2 micro-batches"}},
    {"hidden", {1, INFINITY, "a size"}},
    {"ffn", {1, INFINITY, "a size"}},
    {"experts", {1, INFINITY, "an expert count"}},
    {"topk", {1, INFINITY, "an expert count"}},
    {"tp", {1, INFINITY, "a group size"}},
    {"ep", {1, INFINITY, "a group size"}},
    {"world", {1, INFINITY, "a rank count"}},
    {"overlap", {1, INFINITY, "a chunk count"}},
    {"iters", {1, INFINITY, "an iteration count"}},
    {"dp", {1, INFINITY, "a replica count"}},
    {"overlap_efficiency", {-INFINITY, INFINITY, "a ratio"}},
    {"change_pct", {-100, INFINITY, "a change of a non-negative median"}},
    {"reference", {0, INFINITY, "a published figure"}},
    {"model", {0, INFINITY, "a modelled figure"}},
};

/* batch and seq are at least 1 in the files of layer and FFN points; an All-to-All file writes 0
 * for its uniform pattern. */
static struct range column_range(const struct mp_csv_schema *f, const struct mp_column *c)
{
    int a2a = f->key == &mp_a2a_key_columns;
    if (!strcmp(c->name, "batch") || !strcmp(c->name, "seq"))
        return a2a ? (struct range){0, INFINITY, "a token count"}
                   : (struct range){1, INFINITY, "a token count of a point"};
    for (size_t i = 0; i < sizeof named_ranges / sizeof named_ranges[0]; i++)
        if (!strcmp(named_ranges[i].name, c->name))
            return named_ranges[i].r;
    return (struct range){0, INFINITY, strcmp(c->unit, "–") ? c->unit : "a count or a ratio"};
}

/* The column named `name` of file f, or of either key (compare.csv carries its inputs' key). */
static const struct mp_column *find_column(const struct mp_csv_schema *f, const char *name)
{
    int i = mp_schema_index(f, name);
    if (i >= 0)
        return mp_schema_column(f, i);
    const struct mp_columns *keys[] = {&mp_workload_key_columns, &mp_a2a_key_columns};
    for (int k = 0; k < 2; k++)
        for (int j = 0; j < keys[k]->n; j++)
            if (!strcmp(keys[k]->col[j].name, name))
                return &keys[k]->col[j];
    return NULL;
}

/* One cell of number column c: empty (undefined) or a whole, finite number in its range. MP_OK
 * or MP_ERR_USAGE after a message naming file, line and column. */
static int check_cell(const struct mp_table *t, long row, int col, const struct mp_csv_schema *f,
                      const struct mp_column *c)
{
    const char *s = t->cells[row][col];
    if (!*s)
        return MP_OK;
    char *end;
    errno = 0;
    double v;
    if (c->format == MP_CELL_INT) {
        long long n = strtoll(s, &end, 10);
        v = (double)n;
        if (end == s || *end || errno == ERANGE) {
            mp_usage("%s line %ld, column %d (%s): \"%s\" is not an integer", t->path,
                     t->line[row], col + 1, c->name, s);
            return MP_ERR_USAGE;
        }
    } else {
        v = strtod(s, &end);
        if (end == s || *end) {
            mp_usage("%s line %ld, column %d (%s): \"%s\" is not a number", t->path,
                     t->line[row], col + 1, c->name, s);
            return MP_ERR_USAGE;
        }
        if (!isfinite(v)) {
            mp_usage("%s line %ld, column %d (%s): %s is not a finite number", t->path,
                     t->line[row], col + 1, c->name, s);
            return MP_ERR_USAGE;
        }
    }
    struct range r = column_range(f, c);
    if (v < r.lo || v > r.hi) {
        mp_usage("%s line %ld, column %d (%s): %s is outside [%g, %g] (%s)", t->path,
                 t->line[row], col + 1, c->name, s, r.lo, r.hi, r.what);
        return MP_ERR_USAGE;
    }
    return MP_OK;
}

/* ---- no point twice ---- */

struct identity {
    const struct mp_table *t;
    const int *cols;
    int n;
};

/* Rows i and j compared by the identity columns, cell by cell: 0 when they are one point. */
static int identity_cmp(const struct identity *id, long i, long j)
{
    for (int k = 0; k < id->n; k++) {
        int c = strcmp(id->t->cells[i][id->cols[k]], id->t->cells[j][id->cols[k]]);
        if (c)
            return c;
    }
    return 0;
}

/* A row as qsort moves it, with the columns it is compared by. */
struct row_ref {
    const struct identity *id;
    long row;
};

static int row_ref_cmp(const void *a, const void *b)
{
    const struct row_ref *x = a, *y = b;
    int c = identity_cmp(x->id, x->row, y->row);
    return c ? c : (x->row > y->row) - (x->row < y->row); /* alike: in file order */
}

/* A row is one point (its key), one iteration of it (iter), one rank of it (rank), or both: two
 * rows alike in all of these would count one sample twice. MP_OK or MP_ERR_USAGE. */
static int check_unique(const struct mp_table *t, const struct mp_csv_schema *f)
{
    if (f->key->n == 0 || t->nrows < 2)
        return MP_OK;
    int cols[MP_SCHEMA_MAX_COLS], n = 0;
    for (int k = 0; k < f->key->n; k++) {
        int c = mp_table_col(t, f->key->col[k].name);
        if (c >= 0)
            cols[n++] = c;
    }
    /* iteration and rank, where the schema and the file have them */
    int it = mp_schema_index(f, "iter") >= 0 ? mp_table_col(t, "iter") : -1,
        rk = mp_schema_index(f, "rank") >= 0 ? mp_table_col(t, "rank") : -1;
    if (it >= 0)
        cols[n++] = it;
    if (rk >= 0)
        cols[n++] = rk;
    struct row_ref *order = malloc((size_t)t->nrows * sizeof *order);
    if (!order) {
        mp_error("%s: out of memory", t->path);
        return MP_ERR_RUNTIME;
    }
    struct identity id = {t, cols, n};
    for (long i = 0; i < t->nrows; i++)
        order[i] = (struct row_ref){&id, i};
    qsort(order, (size_t)t->nrows, sizeof *order, row_ref_cmp);
    int rc = MP_OK;
    for (long i = 1; i < t->nrows && rc == MP_OK; i++) {
        long a = order[i - 1].row, b = order[i].row;
        if (identity_cmp(&id, a, b) == 0) {
            mp_usage("%s line %ld repeats line %ld: the same point%s", t->path, t->line[b],
                     t->line[a], it >= 0 && rk >= 0 ? ", iteration and rank"
                                 : it >= 0          ? " and iteration"
                                 : rk >= 0          ? " and rank" : "");
            rc = MP_ERR_USAGE;
        }
    }
    free(order);
    return rc;
}

int mp_table_validate(const struct mp_table *t, const struct mp_csv_schema *f)
{
    if (!f) {
        const char *base = strrchr(t->path, '/');
        if (!(f = mp_schema_find(base ? base + 1 : t->path)))
            return MP_OK;
    }
    for (int col = 0; col < t->ncols; col++) {
        const struct mp_column *c = find_column(f, t->cols[col]);
        if (!c || c->format == MP_CELL_TEXT)
            continue;
        for (long row = 0; row < t->nrows; row++)
            if (check_cell(t, row, col, f, c) != MP_OK)
                return MP_ERR_USAGE;
    }
    return check_unique(t, f);
}
