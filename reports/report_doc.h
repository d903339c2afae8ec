/* report_doc.h - moeperf-report's document: one writer for the HTML page and the Markdown at
 * once (headings, paragraphs, lists, tables), and the cell formats and readers its sections share. */
#ifndef MP_REPORT_DOC_H
#define MP_REPORT_DOC_H

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "results.h"

#define CELL 192 /* one table cell's text */

struct doc {
    FILE *h, *m;
    int items; /* list items written (or, with neither file, that would be) */
};

/* HTML and Markdown escapes of `s` into f. */
void html_esc(FILE *f, const char *s);
void md_esc(FILE *f, const char *s);
/* A heading of `level` (2, 3), a paragraph, a list opened (1) or closed (0) and one of its items
 * (`head` in bold, then the text), a table's row of texts or of cells (a header row when
 * `header`), a table opened or closed, and a titled table with its header row; each writes the
 * HTML page and the Markdown alike, whichever of d->h and d->m is open. */
void doc_h(struct doc *d, int level, const char *text);
void doc_p(struct doc *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void doc_ul(struct doc *d, int open);
void doc_li(struct doc *d, const char *head, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void doc_row_texts(struct doc *d, int n, const char *const *cells, int header);
void doc_row(struct doc *d, int n, char cells[][CELL], int header);
void doc_table(struct doc *d, int open);
void doc_table_head(struct doc *d, const char *title, const char *const *head, int n);

/* ---- numbers as text ---- */

static inline void f_us(char *b, double v)
{
    if (isnan(v))
        snprintf(b, CELL, "–");
    else if (fabs(v) >= 100)
        snprintf(b, CELL, "%.0f", v);
    else
        snprintf(b, CELL, "%.3g", v);
}

static inline void f_g(char *b, double v, const char *fmt)
{
    if (isnan(v))
        snprintf(b, CELL, "–");
    else
        snprintf(b, CELL, fmt, v);
}

static inline void f_pct(char *b, double v) { f_g(b, 100 * v, "%.1f %%"); }

static inline void f_bytes(char *b, double v)
{
    if (isnan(v))
        snprintf(b, CELL, "–");
    else if (v >= 1 << 30)
        snprintf(b, CELL, "%.4g GiB", v / (1 << 30));
    else if (v >= 1 << 20)
        snprintf(b, CELL, "%.4g MiB", v / (1 << 20));
    else if (v >= 1 << 10)
        snprintf(b, CELL, "%.4g KiB", v / (1 << 10));
    else
        snprintf(b, CELL, "%.0f B", v);
}

static inline double num(const struct mp_table *t, long row, const char *col)
{
    int c = mp_table_col(t, col);
    if (c < 0 || !*t->cells[row][c])
        return NAN;
    char *end;
    double v = strtod(t->cells[row][c], &end);
    return *end ? NAN : v;
}

static inline const char *str(const struct mp_table *t, long row, const char *col)
{
    int c = mp_table_col(t, col);
    return c < 0 ? "" : t->cells[row][c];
}

static inline void batch_text(char *b, double v) { f_g(b, v, "%.0f"); }

static inline const char *jstr(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItem(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static inline double jnum(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItem(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

#endif
