/* options.c - table-driven command-line parsing, validation and generated --help (options.h). */
#include "options.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "error.h"
#include "git_rev.h"

/* A sweep longer than this is almost certainly a typo ("1:1000000"). */
#define MP_LIST_MAX 4096
/* --help wraps descriptions at this column. */
#define HELP_WIDTH 100
/* The option column of --help is at most this wide; longer names push their text to a new line. */
#define HELP_COL_MAX 30

static const char list_syntax[] = "a comma-separated list of values and ranges a:b, a:b:xF, a:b:+S";

static void *field(const struct mp_opt *o, void *opts) { return (char *)opts + o->offset; }

static int has_range(const struct mp_opt *o) { return o->min <= o->max; }

/* Strictly parse a decimal integer: the whole of `s`, no leading blanks, no overflow. */
static int parse_ll(const char *s, long long *out)
{
    if (!*s || isspace((unsigned char)*s))
        return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end)
        return -1;
    *out = v;
    return 0;
}

int mp_size_parse(const char *text, long long *out)
{
    if (!text || !isdigit((unsigned char)*text))
        return -1;
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno)
        return -1;
    long long mult = 1;
    switch (toupper((unsigned char)*end)) {
    case 'K': mult = 1LL << 10; end++; break;
    case 'M': mult = 1LL << 20; end++; break;
    case 'G': mult = 1LL << 30; end++; break;
    default: break;
    }
    /* Optional unit: "B" always, "iB" only after a K/M/G prefix ("64K", "64KB", "64KiB", "64B"). */
    if (mult > 1 && (end[0] == 'i' || end[0] == 'I') && (end[1] == 'b' || end[1] == 'B'))
        end += 2;
    else if (*end == 'b' || *end == 'B')
        end++;
    if (*end)
        return -1;
    if (v > LLONG_MAX / mult)
        return -1;
    *out = v * mult;
    return 0;
}

/* Parse one list element or range bound: an integer, or a size when `with_suffix`. */
static int parse_elem(const char *s, int with_suffix, long long *out)
{
    return with_suffix ? mp_size_parse(s, out) : parse_ll(s, out);
}

void mp_list_free(struct mp_list *l)
{
    if (!l)
        return;
    free(l->v);
    l->v = NULL;
    l->n = 0;
}

/* Append `v` to `l` (capacity *cap). Returns -1 when the list would exceed MP_LIST_MAX. */
static int list_push(struct mp_list *l, int *cap, long long v, const char *what, const char *text)
{
    if (l->n >= MP_LIST_MAX) {
        mp_usage("%s: '%s' has more than %d elements", what, text, MP_LIST_MAX);
        return -1;
    }
    if (l->n == *cap) {
        int ncap = *cap ? 2 * *cap : 16;
        long long *nv = realloc(l->v, (size_t)ncap * sizeof *nv);
        if (!nv) {
            mp_usage("%s: out of memory parsing '%s'", what, text);
            return -1;
        }
        l->v = nv;
        *cap = ncap;
    }
    l->v[l->n++] = v;
    return 0;
}

/* Expand one range item "a:b", "a:b:xF" or "a:b:+S" (already split at ':' into up to three parts)
 * into `l`. */
static int list_range(char *item, int with_suffix, const char *what, const char *text,
                      struct mp_list *l, int *cap)
{
    const char *kind = with_suffix ? "a size" : "an integer";
    char *parts[3] = {item, NULL, NULL};
    int np = 1;
    for (char *p = item; *p; p++) {
        if (*p != ':')
            continue;
        if (np == 3) {
            mp_usage("%s: a range in '%s' has more than two ':'; expected %s", what, text,
                     list_syntax);
            return -1;
        }
        *p = '\0';
        parts[np++] = p + 1;
    }
    long long a, b, step = 1;
    int geometric = 0;
    const char *bad = parse_elem(parts[0], with_suffix, &a)   ? parts[0]
                      : parse_elem(parts[1], with_suffix, &b) ? parts[1]
                                                              : NULL;
    if (bad) {
        mp_usage("%s: range bound '%s' in '%s' is not %s; expected %s", what, bad, text, kind,
                 list_syntax);
        return -1;
    }
    if (np == 3) {
        const char *s = parts[2];
        if (*s == 'x' || *s == 'X') {
            geometric = 1;
            if (parse_ll(s + 1, &step) || step < 2) {
                mp_usage("%s: range step '%s' in '%s': the factor after 'x' must be an integer "
                         ">= 2",
                         what, s, text);
                return -1;
            }
        } else if (*s == '+') {
            if (parse_elem(s + 1, with_suffix, &step) || step < 1) {
                mp_usage("%s: range step '%s' in '%s': the step after '+' must be %s >= 1", what,
                         s, text, kind);
                return -1;
            }
        } else {
            mp_usage("%s: range step '%s' in '%s' must be xF (geometric) or +S (arithmetic)", what,
                     s, text);
            return -1;
        }
    }
    if (a > b) {
        mp_usage("%s: range '%lld:%lld' in '%s' is empty; the start must be <= the end", what, a,
                 b, text);
        return -1;
    }
    if (geometric && a < 1) {
        mp_usage("%s: geometric range in '%s' must start at >= 1, not %lld", what, text, a);
        return -1;
    }
    for (long long v = a;;) {
        if (list_push(l, cap, v, what, text))
            return -1;
        if (geometric) {
            if (v > b / step)
                break;
            v *= step;
        } else {
            if (v > b - step)
                break;
            v += step;
        }
    }
    return 0;
}

int mp_list_parse(const char *text, int with_suffix, const char *what, struct mp_list *out)
{
    out->n = 0;
    out->v = NULL;
    if (!what)
        what = "list";
    if (!text || !*text) {
        mp_usage("%s: empty list; expected %s", what, list_syntax);
        return MP_ERR_USAGE;
    }
    char *copy = strdup(text);
    if (!copy) {
        mp_usage("%s: out of memory parsing '%s'", what, text);
        return MP_ERR_USAGE;
    }
    int cap = 0, rc = MP_OK;
    char *item = copy;
    for (;;) {
        char *comma = strchr(item, ',');
        if (comma)
            *comma = '\0';
        if (!*item) {
            mp_usage("%s: empty element in '%s'; expected %s", what, text, list_syntax);
            rc = MP_ERR_USAGE;
            break;
        }
        if (strchr(item, ':')) {
            if (list_range(item, with_suffix, what, text, out, &cap)) {
                rc = MP_ERR_USAGE;
                break;
            }
        } else {
            long long v;
            if (parse_elem(item, with_suffix, &v)) {
                mp_usage("%s: '%s' in '%s' is not %s; expected %s", what, item, text,
                         with_suffix ? "a size (integer with optional K/M/G suffix)"
                                     : "an integer",
                         list_syntax);
                rc = MP_ERR_USAGE;
                break;
            }
            if (list_push(out, &cap, v, what, text)) {
                rc = MP_ERR_USAGE;
                break;
            }
        }
        if (!comma)
            break;
        item = comma + 1;
    }
    free(copy);
    for (int i = 0; i < out->n && rc == MP_OK; i++) /* a point twice would be two rows, one key */
        for (int j = 0; j < i && rc == MP_OK; j++)
            if (out->v[j] == out->v[i]) {
                mp_usage("%s: '%s' gives %lld twice; give each value once", what, text,
                         out->v[i]);
                rc = MP_ERR_USAGE;
            }
    if (rc != MP_OK)
        mp_list_free(out);
    return rc;
}

static void strlist_free(struct mp_strlist *l)
{
    for (int i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
    l->v = NULL;
    l->n = 0;
}

/* Does `word` match one of `choices`: equal to it, or starting with a choice that ends in ':'? */
static int choice_ok(const char *const *choices, const char *word)
{
    if (!choices)
        return 1;
    for (const char *const *c = choices; *c; c++) {
        size_t len = strlen(*c);
        if (strcmp(*c, word) == 0)
            return 1;
        if (len && (*c)[len - 1] == ':' && strncmp(*c, word, len) == 0)
            return 1;
    }
    return 0;
}

/* Write the choices as "a|b|zipf:..." into buf. */
static void choices_str(const char *const *choices, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (const char *const *c = choices; *c && used < len; c++) {
        size_t clen = strlen(*c);
        int n = snprintf(buf + used, len - used, "%s%s%s", c == choices ? "" : "|", *c,
                         clen && (*c)[clen - 1] == ':' ? "..." : "");
        if (n < 0)
            break;
        used += (size_t)n;
    }
}

static int refuse_choice(const struct mp_opt *o, const char *what, const char *word)
{
    char buf[512];
    choices_str(o->choices, buf, sizeof buf);
    mp_usage("%s: '%s' is not one of %s", what, word, buf);
    return MP_ERR_USAGE;
}

static int check_range(const struct mp_opt *o, const char *what, double v, const char *shown)
{
    if (has_range(o) && (v < o->min || v > o->max)) {
        mp_usage("%s: %s is out of range [%.15g, %.15g]", what, shown, o->min, o->max);
        return MP_ERR_USAGE;
    }
    return MP_OK;
}

static int parse_strlist(const struct mp_opt *o, const char *val, const char *what,
                         struct mp_strlist *out)
{
    out->n = 0;
    out->v = NULL;
    size_t cap = 2;
    for (const char *p = val; *p; p++)
        cap += *p == ',';
    out->v = calloc(cap, sizeof *out->v);
    if (!out->v) {
        mp_usage("%s: out of memory parsing '%s'", what, val);
        return MP_ERR_USAGE;
    }
    const char *item = val;
    for (;;) {
        const char *comma = strchr(item, ',');
        size_t len = comma ? (size_t)(comma - item) : strlen(item);
        if (len == 0) {
            mp_usage("%s: empty element in '%s'; expected comma-separated words", what, val);
            goto fail;
        }
        char *w = strndup(item, len);
        if (!w) {
            mp_usage("%s: out of memory parsing '%s'", what, val);
            goto fail;
        }
        out->v[out->n++] = w;
        if (!choice_ok(o->choices, w)) {
            refuse_choice(o, what, w);
            goto fail;
        }
        for (int j = 0; j < out->n - 1; j++)
            if (!strcmp(out->v[j], w)) {
                mp_usage("%s: '%s' gives %s twice; give each value once", what, val, w);
                goto fail;
            }
        if (!comma)
            break;
        item = comma + 1;
    }
    return MP_OK;
fail:
    strlist_free(out);
    return MP_ERR_USAGE;
}

/* Free whatever `o`'s field holds and reset it to the empty state. */
static void free_field(const struct mp_opt *o, void *opts)
{
    void *f = field(o, opts);
    switch (o->type) {
    case MP_OPT_STRING:
        free(*(char **)f);
        *(char **)f = NULL;
        break;
    case MP_OPT_INT_LIST:
    case MP_OPT_SIZE_LIST: mp_list_free(f); break;
    case MP_OPT_STRING_LIST: strlist_free(f); break;
    default: break;
    }
}

/* Parse `val` (NULL only for FLAG) into `o`'s field, replacing what it held. `what` names the
 * flag in messages. */
static int set_value(const struct mp_opt *o, void *opts, const char *val, const char *what)
{
    void *f = field(o, opts);
    long long ll;
    switch (o->type) {
    case MP_OPT_FLAG:
        *(int *)f = 1;
        return MP_OK;
    case MP_OPT_INT:
        if (parse_ll(val, &ll)) {
            mp_usage("%s: '%s' is not an integer", what, val);
            return MP_ERR_USAGE;
        }
        if (ll < INT_MIN || ll > INT_MAX) {
            mp_usage("%s: %s is out of range [%d, %d]", what, val, INT_MIN, INT_MAX);
            return MP_ERR_USAGE;
        }
        if (check_range(o, what, (double)ll, val))
            return MP_ERR_USAGE;
        *(int *)f = (int)ll;
        return MP_OK;
    case MP_OPT_LLONG:
        if (parse_ll(val, &ll)) {
            mp_usage("%s: '%s' is not an integer", what, val);
            return MP_ERR_USAGE;
        }
        if (check_range(o, what, (double)ll, val))
            return MP_ERR_USAGE;
        *(long long *)f = ll;
        return MP_OK;
    case MP_OPT_SIZE:
        if (mp_size_parse(val, &ll)) {
            mp_usage("%s: '%s' is not a size (a non-negative integer with optional K, M or G "
                     "suffix, powers of 1024)",
                     what, val);
            return MP_ERR_USAGE;
        }
        if (check_range(o, what, (double)ll, val))
            return MP_ERR_USAGE;
        *(long long *)f = ll;
        return MP_OK;
    case MP_OPT_DOUBLE: {
        char *end;
        errno = 0;
        double d = *val && !isspace((unsigned char)*val) ? strtod(val, &end) : NAN;
        if (isnan(d) || isinf(d) || errno || *end) {
            mp_usage("%s: '%s' is not a finite number", what, val);
            return MP_ERR_USAGE;
        }
        if (check_range(o, what, d, val))
            return MP_ERR_USAGE;
        *(double *)f = d;
        return MP_OK;
    }
    case MP_OPT_STRING: {
        if (!choice_ok(o->choices, val))
            return refuse_choice(o, what, val);
        char *s = strdup(val);
        if (!s) {
            mp_usage("%s: out of memory", what);
            return MP_ERR_USAGE;
        }
        free(*(char **)f);
        *(char **)f = s;
        return MP_OK;
    }
    case MP_OPT_INT_LIST:
    case MP_OPT_SIZE_LIST: {
        struct mp_list l;
        if (mp_list_parse(val, o->type == MP_OPT_SIZE_LIST, what, &l))
            return MP_ERR_USAGE;
        for (int i = 0; i < l.n; i++) {
            if (has_range(o) && (l.v[i] < o->min || l.v[i] > o->max)) {
                int n = i + 1, teen = n % 100 >= 11 && n % 100 <= 13;
                const char *th = teen ? "th" : n % 10 == 1 ? "st" : n % 10 == 2 ? "nd"
                                                          : n % 10 == 3 ? "rd" : "th";
                int low = l.v[i] < o->min;
                mp_usage("%s: the %d%s value of '%s', %lld, is %s the %s %.15g (accepted: %.15g "
                         "to %.15g)", what, n, th, val, l.v[i], low ? "below" : "above",
                         low ? "minimum" : "maximum", low ? o->min : o->max, o->min, o->max);
                mp_list_free(&l);
                return MP_ERR_USAGE;
            }
        }
        mp_list_free(f);
        *(struct mp_list *)f = l;
        return MP_OK;
    }
    case MP_OPT_STRING_LIST: {
        struct mp_strlist l;
        if (parse_strlist(o, val, what, &l))
            return MP_ERR_USAGE;
        strlist_free(f);
        *(struct mp_strlist *)f = l;
        return MP_OK;
    }
    }
    mp_usage("%s: option type %d is not known", what, (int)o->type);
    return MP_ERR_USAGE;
}

/* Put every field in its default state (options.h: NULL defaults mean "unset"). */
static int set_defaults(const struct mp_opt *table, void *opts)
{
    for (const struct mp_opt *o = table; o->name; o++) {
        void *f = field(o, opts);
        switch (o->type) {
        case MP_OPT_FLAG: *(int *)f = 0; break;
        case MP_OPT_INT: *(int *)f = -1; break;
        case MP_OPT_LLONG:
        case MP_OPT_SIZE: *(long long *)f = -1; break;
        case MP_OPT_DOUBLE: *(double *)f = -1.0; break;
        case MP_OPT_STRING: *(char **)f = NULL; break;
        case MP_OPT_INT_LIST:
        case MP_OPT_SIZE_LIST: *(struct mp_list *)f = (struct mp_list){0, NULL}; break;
        case MP_OPT_STRING_LIST: *(struct mp_strlist *)f = (struct mp_strlist){0, NULL}; break;
        }
    }
    for (const struct mp_opt *o = table; o->name; o++) {
        if (!o->defval)
            continue;
        char what[128];
        snprintf(what, sizeof what, "default of --%s", o->name);
        if (o->type == MP_OPT_FLAG) {
            *(int *)field(o, opts) = strcmp(o->defval, "0") != 0;
            continue;
        }
        if (set_value(o, opts, o->defval, what))
            return MP_ERR_USAGE;
    }
    return MP_OK;
}

/* Find "--name" or "--name=value" (arg without the dashes) in the table. */
static const struct mp_opt *find_opt(const struct mp_opt *table, const char *name, size_t len)
{
    for (const struct mp_opt *o = table; o->name; o++)
        if (strlen(o->name) == len && strncmp(o->name, name, len) == 0)
            return o;
    return NULL;
}

int mp_opts_parse(const struct mp_opt *table, void *opts, int argc, char **argv,
                  const char *summary, char ***positional, int *npositional)
{
    int rc = MP_OK, npos = 0, only_positional = 0;
    char **pos = NULL;
    if (positional) {
        *positional = NULL;
        pos = calloc((size_t)(argc > 0 ? argc : 1), sizeof *pos);
        if (!pos) {
            mp_usage("out of memory parsing arguments");
            return MP_ERR_USAGE;
        }
    }
    if (npositional)
        *npositional = 0;
    if ((rc = set_defaults(table, opts)))
        goto out;

    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (only_positional || arg[0] != '-' || strcmp(arg, "-") == 0) {
            if (!pos) {
                mp_usage("unexpected argument '%s' (this program takes only --flags; see --help)",
                         arg);
                rc = MP_ERR_USAGE;
                goto out;
            }
            pos[npos++] = argv[i];
            continue;
        }
        if (strcmp(arg, "--") == 0) {
            only_positional = 1;
            continue;
        }
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            mp_opts_help(stdout, table, summary);
            rc = MP_HELP;
            goto out;
        }
        if (strcmp(arg, "--version") == 0) {
            printf("%s %s (%s)\n", mp_prog(), MOEPERF_VERSION, MOEPERF_GIT_REV);
            rc = MP_HELP;
            goto out;
        }
        const char *name = arg + 2, *eq = strchr(arg, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const struct mp_opt *o = arg[1] == '-' ? find_opt(table, name, len) : NULL;
        int negated = 0; /* --no-NAME: a FLAG turned off (flags that default to on) */
        if (!o && arg[1] == '-' && len > 3 && strncmp(name, "no-", 3) == 0) {
            o = find_opt(table, name + 3, len - 3);
            negated = o != NULL;
            if (o && o->type != MP_OPT_FLAG)
                o = NULL;
        }
        if (!o) {
            mp_usage("unknown flag %.*s (see --help)", (int)(eq ? eq - arg : (long)strlen(arg)),
                     arg);
            rc = MP_ERR_USAGE;
            goto out;
        }
        char what[128];
        snprintf(what, sizeof what, "--%s%s", negated ? "no-" : "", o->name);
        const char *val = NULL;
        if (o->type == MP_OPT_FLAG) {
            if (eq) {
                mp_usage("%s takes no value (got '%s')", what, eq + 1);
                rc = MP_ERR_USAGE;
                goto out;
            }
        } else if (eq) {
            val = eq + 1;
        } else if (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) {
            val = argv[++i];
        } else {
            mp_usage("%s: missing value", what);
            rc = MP_ERR_USAGE;
            goto out;
        }
        if (negated)
            *(int *)field(o, opts) = 0;
        else if ((rc = set_value(o, opts, val, what)))
            goto out;
    }
out:
    if (rc != MP_OK) {
        mp_opts_free(table, opts);
        free(pos);
        return rc;
    }
    if (positional)
        *positional = pos;
    if (npositional)
        *npositional = npos;
    return MP_OK;
}

static const char *default_metavar(enum mp_opt_type t)
{
    switch (t) {
    case MP_OPT_FLAG: return "";
    case MP_OPT_INT:
    case MP_OPT_LLONG: return "N";
    case MP_OPT_DOUBLE: return "X";
    case MP_OPT_SIZE: return "SIZE";
    case MP_OPT_STRING: return "STR";
    case MP_OPT_INT_LIST:
    case MP_OPT_SIZE_LIST:
    case MP_OPT_STRING_LIST: return "LIST";
    }
    return "";
}

/* Print `text` word-wrapped to HELP_WIDTH, continuation lines indented by `col` columns; the first
 * line starts at column `at`. */
static void print_wrapped(FILE *f, const char *text, int col, int at)
{
    const char *p = text;
    while (*p) {
        while (*p == ' ')
            p++;
        if (!*p)
            break;
        int wlen = (int)strcspn(p, " ");
        if (at > col && at + 1 + wlen > HELP_WIDTH) {
            fprintf(f, "\n%*s", col, "");
            at = col;
        }
        if (at > col) {
            fputc(' ', f);
            at++;
        }
        fprintf(f, "%.*s", wlen, p);
        at += wlen;
        p += wlen;
    }
    fputc('\n', f);
}

void mp_opts_help(FILE *f, const struct mp_opt *table, const char *summary)
{
    fprintf(f, "usage: %s [options]\n", mp_prog());
    if (summary && *summary)
        fprintf(f, "%s\n", summary);
    fprintf(f, "\noptions:\n");

    int col = 0;
    for (const struct mp_opt *o = table; o->name; o++) {
        const char *mv = o->metavar ? o->metavar : default_metavar(o->type);
        int w = 2 + 2 + (int)strlen(o->name) + (*mv ? 1 + (int)strlen(mv) : 0);
        if (w > col)
            col = w;
    }
    if (col < (int)strlen("  --version"))
        col = (int)strlen("  --version");
    if (col > HELP_COL_MAX)
        col = HELP_COL_MAX;
    col += 3;

    for (const struct mp_opt *o = table; o->name; o++) {
        const char *mv = o->metavar ? o->metavar : default_metavar(o->type);
        int at = fprintf(f, "  --%s%s%s", o->name, *mv ? " " : "", mv);
        if (at + 1 > col) {
            fprintf(f, "\n%*s", col, "");
        } else {
            fprintf(f, "%*s", col - at, "");
        }

        char desc[2048];
        size_t used = 0;
        used += (size_t)snprintf(desc, sizeof desc, "%s", o->help ? o->help : "");
        if (o->type == MP_OPT_FLAG && o->defval && strcmp(o->defval, "0") != 0 &&
            used < sizeof desc)
            used += (size_t)snprintf(desc + used, sizeof desc - used,
                                     " [default: on; --no-%s turns it off]", o->name);
        if (o->defval && o->type != MP_OPT_FLAG && used < sizeof desc)
            used += (size_t)snprintf(desc + used, sizeof desc - used, " [default: %s]", o->defval);
        if (has_range(o) && o->type != MP_OPT_FLAG && used < sizeof desc)
            used += (size_t)snprintf(desc + used, sizeof desc - used, " [range: %.15g..%.15g]",
                                     o->min, o->max);
        if (o->choices && used < sizeof desc) {
            char ch[1024];
            choices_str(o->choices, ch, sizeof ch);
            snprintf(desc + used, sizeof desc - used, " [one of: %s]", ch);
        }
        print_wrapped(f, desc, col, col);
    }
    fprintf(f, "  -h, --help%*sprint this help and exit\n", col - 12 > 1 ? col - 12 : 1, "");
    fprintf(f, "  --version%*sprint the version and exit\n", col - 11 > 1 ? col - 11 : 1, "");
}

void mp_opts_free(const struct mp_opt *table, void *opts)
{
    for (const struct mp_opt *o = table; o->name; o++)
        free_field(o, opts);
}
