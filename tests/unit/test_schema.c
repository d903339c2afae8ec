/* test_schema.c - the results schema holds together, docs/CSV.md shows exactly its tables, and
 * plots/figures.csv names only columns it has; with --write, rewrites docs/CSV.md's tables. */
#include "check.h"
#include "metrics.h"
#include "results.h"
#include "schema.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define KEY_MARK "<!-- schema-key "
#define COLS_MARK "<!-- schema "
#define END_MARK "<!-- end schema -->"

/* ---- a growing string ---- */

struct text {
    char *s;
    size_t n, cap;
};

static void put(struct text *t, const char *s, size_t n)
{
    if (t->n + n + 1 > t->cap) {
        t->cap = (t->n + n + 1) * 2;
        t->s = realloc(t->s, t->cap);
        if (!t->s)
            abort();
    }
    memcpy(t->s + t->n, s, n);
    t->n += n;
    t->s[t->n] = '\0';
}

static void puts_(struct text *t, const char *s) { put(t, s, strlen(s)); }

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    struct text t = {0};
    char buf[4096];
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, f)) > 0)
        put(&t, buf, got);
    fclose(f);
    if (!t.s)
        put(&t, "", 0);
    return t.s;
}

/* ---- the schema on its own ---- */

static void check_tables(void)
{
    for (int i = 0; mp_schemas[i]; i++) {
        const struct mp_csv_schema *f = mp_schemas[i];
        int n = mp_schema_ncols(f);
        CHECK(n > 0 && n <= MP_SCHEMA_MAX_COLS);
        CHECK(mp_schema_find(f->file) == f);
        for (int c = 0; c < n; c++) {
            const struct mp_column *col = mp_schema_column(f, c);
            if (!col->name[0] || !col->unit[0] || !col->meaning[0]) {
                fprintf(stderr, "%s: column %d (%s) lacks a name, unit or meaning\n", f->file, c,
                        col->name);
                check_failures++;
            }
            if (mp_schema_index(f, col->name) != c) {
                fprintf(stderr, "%s: column %s appears twice\n", f->file, col->name);
                check_failures++;
            }
        }
    }
    CHECK(mp_schema_find("nothing.csv") == NULL);
    CHECK_INT(mp_schema_index(&mp_schema_layer, "no_such_column"), -1);
    CHECK_INT(mp_schema_index(&mp_schema_layer, MPC_source), 0);
    CHECK_INT(mp_schema_index(&mp_schema_layer, MPC_tokens_per_rank), mp_workload_key_columns.n);
    /* layer_samples.csv is iter and then struct mp_iter_metrics field by field */
    const struct mp_columns *s = &mp_schema_layer_samples.cols;
    CHECK_INT(s->n, 1 + (int)MP_ITER_METRICS);
    CHECK(strcmp(s->col[0].name, MPC_iter) == 0);
    for (int k = 0; k < (int)MP_ITER_METRICS && k + 1 < s->n; k++)
        if (strcmp(s->col[k + 1].name, mp_iter_metric_names[k]) != 0) {
            fprintf(stderr, "layer_samples.csv column %d is %s, struct mp_iter_metrics has %s\n",
                    k + 1, s->col[k + 1].name, mp_iter_metric_names[k]);
            check_failures++;
        }
}

/* ---- docs/CSV.md ---- */

static void table(struct text *t, const struct mp_columns *cols)
{
    puts_(t, "| column | unit | format | meaning |\n|---|---|---|---|\n");
    for (int i = 0; i < cols->n; i++) {
        const struct mp_column *c = &cols->col[i];
        char line[1024];
        snprintf(line, sizeof line, "| `%s` | %s | %s | %s |\n", c->name, c->unit,
                 mp_cell_format_name(c->format), c->meaning);
        puts_(t, line);
    }
}

/* The file named by a marker line "<!-- schema[-key] FILE -->", or NULL (reported). */
static const struct mp_csv_schema *marked_file(const char *line, size_t len, size_t skip)
{
    char name[128];
    size_t n = len - skip;
    const char *end = memchr(line + skip, ' ', n);
    n = end ? (size_t)(end - (line + skip)) : n;
    snprintf(name, sizeof name, "%.*s", (int)n, line + skip);
    const struct mp_csv_schema *f = mp_schema_find(name);
    if (!f) {
        fprintf(stderr, "docs/CSV.md: marker names %s, which the schema does not have\n", name);
        check_failures++;
    }
    return f;
}

/* The document with every marked table regenerated from the schema. Counts, per schema file, the
 * tables of its own columns (cols_seen) and of its key (key_seen, by key group). */
static char *regenerate(const char *doc, int *cols_seen, const struct mp_columns **keys_seen,
                        int *nkeys_seen)
{
    struct text out = {0};
    const char *p = doc;
    int skipping = 0;
    while (*p) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        const char *next = nl ? nl + 1 : p + len;
        if (skipping) {
            if (len == strlen(END_MARK) && memcmp(p, END_MARK, len) == 0) {
                put(&out, p, (size_t)(next - p));
                skipping = 0;
            }
            p = next;
            continue;
        }
        put(&out, p, (size_t)(next - p));
        int is_key = strncmp(p, KEY_MARK, strlen(KEY_MARK)) == 0;
        int is_cols = !is_key && strncmp(p, COLS_MARK, strlen(COLS_MARK)) == 0;
        if (is_key || is_cols) {
            const struct mp_csv_schema *f =
                marked_file(p, len, strlen(is_key ? KEY_MARK : COLS_MARK));
            if (f && is_key) {
                table(&out, f->key);
                keys_seen[(*nkeys_seen)++] = f->key;
            } else if (f) {
                table(&out, &f->cols);
                for (int i = 0; mp_schemas[i]; i++)
                    cols_seen[i] += mp_schemas[i] == f;
            }
            skipping = 1;
        }
        p = next;
    }
    if (skipping) {
        fprintf(stderr, "docs/CSV.md: a table marker without \"%s\"\n", END_MARK);
        check_failures++;
    }
    if (!out.s)
        put(&out, "", 0);
    return out.s;
}

static void check_doc(const char *path, int write)
{
    char *doc = slurp(path);
    CHECK(doc != NULL);
    if (!doc)
        return;
    int cols_seen[32] = {0}, nkeys = 0;
    const struct mp_columns *keys[64];
    char *fresh = regenerate(doc, cols_seen, keys, &nkeys);
    for (int i = 0; mp_schemas[i]; i++) {
        const struct mp_csv_schema *f = mp_schemas[i];
        if (cols_seen[i] != 1) {
            fprintf(stderr, "%s: the columns of %s are shown %d times, expected once (%s%s -->)\n",
                    path, f->file, cols_seen[i], COLS_MARK, f->file);
            check_failures++;
        }
        int key_seen = f->key->n == 0;
        for (int k = 0; k < nkeys; k++)
            key_seen |= keys[k] == f->key;
        if (!key_seen) {
            fprintf(stderr, "%s: the key columns of %s are not shown (%s%s -->)\n", path, f->file,
                    KEY_MARK, f->file);
            check_failures++;
        }
    }
    if (write) {
        FILE *o = fopen(path, "wb");
        CHECK(o != NULL);
        if (o) {
            fputs(fresh, o);
            fclose(o);
        }
    } else if (strcmp(doc, fresh) != 0) {
        /* name the first line that differs */
        const char *a = doc, *b = fresh;
        int line = 1;
        while (*a && *a == *b) {
            line += *a == '\n';
            a++;
            b++;
        }
        const char *bl = b;
        while (bl > fresh && bl[-1] != '\n')
            bl--;
        const char *be = strchr(bl, '\n');
        fprintf(stderr,
                "%s line %d differs from the schema (core/results/schema.c); expected:\n%.*s\n"
                "rewrite the tables with: test_schema --write %s FIGURES\n",
                path, line, (int)(be ? be - bl : (long)strlen(bl)), bl, path);
        check_failures++;
    }
    free(fresh);
    free(doc);
}

/* ---- plots/figures.csv ---- */

/* Every space- or '/'-separated name in `list` must be a column of `f`. */
static void check_names(const char *fig, const struct mp_csv_schema *f, const char *what,
                        const char *list)
{
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", list);
    for (char *save = NULL, *w = strtok_r(buf, " /", &save); w; w = strtok_r(NULL, " /", &save)) {
        size_t len = strlen(w);
        if (len > 1 && w[len - 1] == '?') /* an optional column: files before it lack it */
            w[len - 1] = '\0';
        if (mp_schema_index(f, w) < 0) {
            fprintf(stderr, "figures.csv: figure %s: %s column \"%s\" is not a column of %s\n",
                    fig, what, w, f->file);
            check_failures++;
        }
    }
}

static void check_figures(const char *path)
{
    static const char *const need[] = {"name", "csv", "x", "y", "group", "extra", "x_ratio",
                                       "summary", "title", "caption"};
    struct mp_table t;
    CHECK_INT(mp_table_read(path, &t), 0);
    int col[10];
    for (int k = 0; k < 10; k++) {
        col[k] = mp_table_col(&t, need[k]);
        if (col[k] < 0) {
            fprintf(stderr, "%s: no column %s\n", path, need[k]);
            check_failures++;
            mp_table_free(&t);
            return;
        }
    }
    CHECK(t.nrows > 0);
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash)
        slash[1] = '\0';
    else
        snprintf(dir, sizeof dir, "./");
    for (long i = 0; i < t.nrows; i++) {
        char **r = t.cells[i];
        const char *name = r[col[0]] ? r[col[0]] : ""; /* (a full row: never NULL) */
        const struct mp_csv_schema *f = mp_schema_find(r[col[1]]);
        if (!f) {
            fprintf(stderr, "figures.csv: figure %s: %s is not a file of the schema\n", name,
                    r[col[1]]);
            check_failures++;
            continue;
        }
        check_names(name, f, "x", r[col[2]]);
        check_names(name, f, "y", r[col[3]]);
        check_names(name, f, "group", r[col[4]]);
        check_names(name, f, "extra", r[col[5]]);
        check_names(name, f, "x_ratio", r[col[6]]);
        CHECK(r[col[2]][0] && r[col[3]][0] && r[col[8]][0] && r[col[9]][0]);
        char gp[1200];
        snprintf(gp, sizeof gp, "%s%s.gp", dir, name);
        if (access(gp, R_OK) != 0) {
            fprintf(stderr, "figures.csv: figure %s has no script %s\n", name, gp);
            check_failures++;
        }
        for (long j = 0; j < i; j++)
            if (strcmp(t.cells[j][col[0]], name) == 0) {
                fprintf(stderr, "figures.csv: figure %s is listed twice\n", name);
                check_failures++;
            }
    }
    mp_table_free(&t);
}

int main(int argc, char **argv)
{
    int write = argc > 1 && strcmp(argv[1], "--write") == 0;
    if (argc != 3 + write) {
        fprintf(stderr, "usage: test_schema [--write] docs/CSV.md plots/figures.csv\n");
        return 2;
    }
    check_tables();
    check_doc(argv[1 + write], write);
    check_figures(argv[2 + write]);
    return check_failures;
}
