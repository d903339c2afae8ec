/* report_doc.c - moeperf-report's document writer: HTML and Markdown at once (report_doc.h), and
 * figures inlined into the HTML (report.h). */
#include "report_doc.h"

#include <stdarg.h>
#include <string.h>

#include "error.h"
#include "report.h"

void html_esc(FILE *f, const char *s)
{
    for (; *s; s++)
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
}

void md_esc(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (strchr("\\`*_[]<>|#", *s))
            fputc('\\', f);
        fputc(*s, f);
    }
}

void doc_h(struct doc *d, int level, const char *text)
{
    if (d->h) {
        fprintf(d->h, "<h%d>", level);
        html_esc(d->h, text);
        fprintf(d->h, "</h%d>\n", level);
    }
    if (d->m) {
        fprintf(d->m, "\n%.*s ", level, "######");
        md_esc(d->m, text);
        fputs("\n\n", d->m);
    }
}

void doc_p(struct doc *d, const char *fmt, ...)
{
    char buf[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (d->h) {
        fputs("<p>", d->h);
        html_esc(d->h, buf);
        fputs("</p>\n", d->h);
    }
    if (d->m) {
        md_esc(d->m, buf);
        fputs("\n\n", d->m);
    }
}

void doc_ul(struct doc *d, int open)
{
    if (d->h)
        fputs(open ? "<ul>\n" : "</ul>\n", d->h);
    if (d->m && !open)
        fputs("\n", d->m);
}

/* A list item: `head` in bold (may be NULL), then the formatted text. */
void doc_li(struct doc *d, const char *head, const char *fmt, ...)
{
    char buf[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    d->items++;
    if (d->h) {
        fputs("<li>", d->h);
        if (head) {
            fputs("<b>", d->h);
            html_esc(d->h, head);
            fputs("</b>: ", d->h);
        }
        html_esc(d->h, buf);
        fputs("</li>\n", d->h);
    }
    if (d->m) {
        fputs("- ", d->m);
        if (head) {
            fputs("**", d->m);
            md_esc(d->m, head);
            fputs("**: ", d->m);
        }
        md_esc(d->m, buf);
        fputs("\n", d->m);
    }
}

/* A table row of n texts; header rows get <th> and, in Markdown, the alignment line (numbers
 * right). */
void doc_row_texts(struct doc *d, int n, const char *const *cells, int header)
{
    if (d->h) {
        fputs("<tr>", d->h);
        for (int i = 0; i < n; i++) {
            fputs(header ? "<th>" : "<td>", d->h);
            html_esc(d->h, cells[i]);
            fputs(header ? "</th>" : "</td>", d->h);
        }
        fputs("</tr>\n", d->h);
    }
    if (d->m) {
        fputs("|", d->m);
        for (int i = 0; i < n; i++) {
            fputc(' ', d->m);
            md_esc(d->m, cells[i]);
            fputs(" |", d->m);
        }
        fputs("\n", d->m);
        if (header) {
            fputs("|", d->m);
            for (int i = 0; i < n; i++)
                fputs(i == 0 ? ":---|" : "---:|", d->m);
            fputs("\n", d->m);
        }
    }
}

/* doc_row_texts of cells[0..n) (n at most 16). */
void doc_row(struct doc *d, int n, char cells[][CELL], int header)
{
    const char *texts[16];
    for (int i = 0; i < n && i < 16; i++)
        texts[i] = cells[i];
    doc_row_texts(d, n < 16 ? n : 16, texts, header);
}

/* Open (open = 1: numbers, right-aligned; 2: text, left-aligned; 3: the answer's table, numbers)
 * or close a table. */
void doc_table(struct doc *d, int open)
{
    if (d->h)
        fputs(open == 3   ? "<div class=\"tw\"><table class=\"answer\">\n"
              : open == 2 ? "<div class=\"tw\"><table class=\"text\">\n"
              : open == 1 ? "<div class=\"tw\"><table>\n"
                          : "</table></div>\n",
              d->h);
    if (d->m)
        fputs("\n", d->m);
}

/* A numeric table under a level-3 heading `title`, opened with its header row `head` (n ≤ 16). */
void doc_table_head(struct doc *d, const char *title, const char *const *head, int n)
{
    char cells[16][CELL];
    doc_h(d, 3, title);
    doc_table(d, 1);
    for (int c = 0; c < n && c < 16; c++)
        snprintf(cells[c], CELL, "%s", head[c]);
    doc_row(d, n < 16 ? n : 16, cells, 1);
}

/* ---- inline SVG ---- */

int rp_svg_inline(const char *svg, const char *prefix, FILE *out)
{
    const char *p = strstr(svg, "<svg");
    if (!p)
        return MP_ERR_RUNTIME;
    /* attribute openings after which an id or a reference to one follows */
    static const char *const marks[] = {"id='", "id=\"", "href='#", "href=\"#", "url(#"};
    while (*p) {
        int hit = 0;
        for (size_t m = 0; m < sizeof marks / sizeof marks[0] && !hit; m++) {
            size_t len = strlen(marks[m]);
            if (strncmp(p, marks[m], len) != 0)
                continue;
            /* "id=" only as a whole attribute name, not the tail of another one */
            if (marks[m][0] == 'i' && p > svg && p[-1] != ' ' && p[-1] != '\t' && p[-1] != '\n')
                continue;
            fwrite(p, 1, len, out);
            fputs(prefix, out);
            p += len;
            hit = 1;
        }
        if (!hit)
            fputc(*p++, out);
    }
    return MP_OK;
}
