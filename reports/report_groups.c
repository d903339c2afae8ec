/* report_groups.c - moeperf-report's a2a.csv and ffn.csv rows grouped into labelled curves. */
#include "report_groups.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "schema.h"

/* A group's cell of `col` (its first row's), "" where its file lacks the column. */
static const char *group_cell(const struct group *g, const char *col)
{
    int c = mp_table_col(g->t, col);
    return c < 0 ? "" : g->t->cells[g->rows[0]][c];
}

/* The table and column cmp_rows compares by (qsort takes no context). */
static const struct mp_table *sort_table;
static int sort_col;

/* qsort order of row indices of sort_table: by the number in column sort_col, ascending. */
static int cmp_rows(const void *a, const void *b)
{
    double x = strtod(sort_table->cells[*(const long *)a][sort_col], NULL);
    double y = strtod(sort_table->cells[*(const long *)b][sort_col], NULL);
    return (x > y) - (x < y);
}

void groups_free(struct group *g, int n)
{
    for (int i = 0; g && i < n; i++) {
        free(g[i].label);
        free(g[i].workload);
        free(g[i].rows);
    }
    free(g);
}

/* The curve labels of groups g[0..n) (docs/plots.md, "Curve labels"), as plots/render titles the
 * curves of their figure: the cells of cols[1..ncols) that differ between the groups, the first
 * nbare of them bare and the rest as name=value (cols[1] alone when none differs), the run
 * directory's name where two groups share every cell, and "(source)", cols[0], at the end; each
 * group's workload: its non-empty cells but source, name=value. MP_OK, or MP_ERR_RUNTIME after a
 * message (out of memory). */
static int label_groups(struct group *g, int n, const char *const *cols, int ncols, int nbare)
{
    int show[MAX_GROUP_COLS], nshow = 0;
    for (int k = 1; k < ncols; k++) {
        /* backend and comm: only where they differ within one source (label_series) */
        int by_source = !strcmp(cols[k], MPC_backend) || !strcmp(cols[k], MPC_comm), differs = 0;
        for (int i = 0; i < n && !differs; i++)
            for (int j = i + 1; j < n && !differs; j++)
                differs = strcmp(group_cell(&g[i], cols[k]), group_cell(&g[j], cols[k])) != 0 &&
                          (!by_source ||
                           !strcmp(group_cell(&g[i], cols[0]), group_cell(&g[j], cols[0])));
        if (differs)
            show[nshow++] = k;
    }
    if (nshow == 0 && ncols > 1)
        show[nshow++] = 1;
    for (int i = 0; i < n; i++) {
        char label[1024] = "";
        size_t used = 0;
        for (int j = 0; j < nshow && used < sizeof label; j++) {
            int k = show[j];
            const char *v = *group_cell(&g[i], cols[k]) ? group_cell(&g[i], cols[k]) : "-";
            used += (size_t)snprintf(label + used, sizeof label - used, "%s%s%s%s", j ? " " : "",
                                     k <= nbare ? "" : cols[k], k <= nbare ? "" : "=", v);
        }
        for (int o = 0; o < n && used < sizeof label; o++) {
            int same = o != i;
            for (int k = 0; k < ncols && same; k++)
                same = strcmp(group_cell(&g[i], cols[k]), group_cell(&g[o], cols[k])) == 0;
            if (same) {
                const char *base = strrchr(g[i].run->dir, '/');
                base = base && base[1] ? base + 1 : g[i].run->dir;
                used += (size_t)snprintf(label + used, sizeof label - used, " [%s]", base);
                break;
            }
        }
        if (used < sizeof label)
            snprintf(label + used, sizeof label - used, " (%s)", group_cell(&g[i], cols[0]));
        char all[2048] = "";
        used = 0;
        for (int k = 1; k < ncols && used < sizeof all; k++)
            if (*group_cell(&g[i], cols[k]))
                used += (size_t)snprintf(all + used, sizeof all - used, "%s%s=%s", used ? " " : "",
                                         cols[k], group_cell(&g[i], cols[k]));
        free(g[i].label);
        free(g[i].workload);
        g[i].workload = strdup(all);
        if (!(g[i].label = strdup(label)) || !g[i].workload) {
            mp_error("out of memory");
            return MP_ERR_RUNTIME;
        }
    }
    return MP_OK;
}

/* Rows of the a2a (which = 1) or ffn (which = 2) table of every run, grouped by the `cols` cells
 * (a column a file lacks counts as empty), each group sorted by `xcol` and labelled by
 * label_groups (cols[1..nbare] bare). */
int make_groups(const struct rp_run *runs, int nruns, int which, const char *const *cols,
                int ncols, int nbare, const char *xcol, struct group **out, int *nout)
{
    struct group *g = NULL;
    int n = 0;
    for (int r = 0; r < nruns; r++) {
        const struct mp_table *t = which == 1 ? &runs[r].a2a : &runs[r].ffn;
        if (!t->cols)
            continue;
        int c[MAX_GROUP_COLS];
        for (int k = 0; k < ncols && k < MAX_GROUP_COLS; k++)
            c[k] = mp_table_col(t, cols[k]);
        for (long row = 0; row < t->nrows; row++) {
            int found = -1;
            for (int i = 0; i < n && found < 0; i++) {
                if (g[i].t != t)
                    continue;
                int eq = 1;
                for (int k = 0; k < ncols && eq; k++)
                    eq = c[k] < 0 || strcmp(t->cells[g[i].rows[0]][c[k]], t->cells[row][c[k]]) == 0;
                if (eq)
                    found = i;
            }
            if (found < 0) {
                struct group *ng = realloc(g, (size_t)(n + 1) * sizeof *ng);
                if (!ng)
                    goto oom;
                g = ng;
                memset(&g[n], 0, sizeof g[n]);
                g[n].run = &runs[r];
                g[n].t = t;
                found = n++;
            }
            long *nr = realloc(g[found].rows, (size_t)(g[found].n + 1) * sizeof *nr);
            if (!nr)
                goto oom;
            g[found].rows = nr;
            g[found].rows[g[found].n++] = row;
        }
    }
    for (int i = 0; i < n; i++) {
        sort_table = g[i].t;
        sort_col = mp_table_col(g[i].t, xcol);
        qsort(g[i].rows, (size_t)g[i].n, sizeof *g[i].rows, cmp_rows);
    }
    if (label_groups(g, n, cols, ncols, nbare) != MP_OK) {
        groups_free(g, n);
        return MP_ERR_RUNTIME;
    }
    *out = g;
    *nout = n;
    return MP_OK;
oom:
    groups_free(g, n);
    mp_error("out of memory");
    return MP_ERR_RUNTIME;
}
