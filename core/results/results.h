/* results.h - the run directory: CSV files flushed row by row, resume support, a CSV reader for the
 * tools that read runs, and run.json. */
#ifndef MP_RESULTS_H
#define MP_RESULTS_H

#include <stddef.h>
#include <stdio.h>

struct cJSON;
struct mp_csv_schema;

/* ---- writing ---- */

/* One CSV row being built. Cells are appended in column order; strings are quoted when they hold
 * a comma, a quote or a newline (RFC 4180). */
struct mp_row {
    char *buf;
    size_t len, cap;
    int ncells;
};
void mp_row_reset(struct mp_row *r);
void mp_row_free(struct mp_row *r);
void mp_row_str(struct mp_row *r, const char *s);
void mp_row_int(struct mp_row *r, long long v);
/* A double with enough digits to round-trip what a timer can resolve: "%.6g" style but never
 * exponent for |v| in [1e-3, 1e15); NAN is written as an empty cell. */
void mp_row_dbl(struct mp_row *r, double v);

/* An open CSV results file. */
struct mp_csv {
    FILE *f;
    char *path;
    int ncols;
};

/* Open `dir/name` for appending rows with header `cols[0..ncols)`. A new or empty file gets the
 * header. An existing file: with resume=0 it is replaced; with resume=1 its header must equal
 * `cols` (else MP_ERR_USAGE naming the file) and a trailing partial line (a row cut by a kill) is
 * truncated away. Errors name the file and return MP_ERR_USAGE (unwritable) or MP_ERR_RUNTIME. */
int mp_csv_open(struct mp_csv *c, const char *dir, const char *name, const char *const *cols,
                int ncols, int resume);
/* What mp_csv_open with resume=1 checks of `dir/name`, read only: a file that is there and not
 * empty must begin with the header `cols` (else MP_ERR_USAGE naming it); a missing or empty file
 * passes. Nothing is written. */
int mp_csv_resume_ok(const char *dir, const char *name, const char *const *cols, int ncols);
/* Write one complete row (must have exactly ncols cells) with one write, then flush, so a kill
 * leaves every earlier row whole. Returns MP_OK or MP_ERR_RUNTIME. */
int mp_csv_write(struct mp_csv *c, const struct mp_row *r);
void mp_csv_close(struct mp_csv *c);

/* The key of a row: its first `nkey` cells as written (with separators). Returns a heap string. */
char *mp_row_key(const struct mp_row *r, int nkey);

/* Length of the first `nkey` cells of CSV text `s` (len bytes): up to the nkey-th comma outside
 * quotes, or all of it (0 for nkey ≤ 0): the key mp_row_key and mp_csv_filter compare. */
size_t mp_csv_key_len(const char *s, size_t len, int nkey);

/* ---- reading ---- */

/* A whole CSV file in memory: header and cells as strings (quotes removed). Lines starting with
 * '#' are comments and skipped. */
struct mp_table {
    char *path;
    int ncols;
    char **cols;
    long nrows;
    char ***cells; /* [nrows][ncols] */
    long *line;    /* [nrows]: the file's line number of each row, for messages */
};

/* Read `path`. A row with a different cell count than the header is an error naming the file and
 * line, except a last line without a newline, which is dropped (a row cut by a kill). Returns
 * MP_OK, MP_ERR_USAGE (missing/unreadable/malformed, message printed). */
int mp_table_read(const char *path, struct mp_table *t);
/* What mp_table_read checks of a file the schema names (its basename: layer.csv, a2a_samples.csv,
 * ...; other files pass), or here of file f of the schema (NULL: by the basename): every number cell empty or a whole, finite number of its column's
 * format within the column's range (docs/CSV.md, "What a reader refuses"), and no two rows of one
 * point (its key, iteration and rank). MP_OK, or MP_ERR_USAGE after a message naming the file,
 * line and column. */
int mp_table_validate(const struct mp_table *t, const struct mp_csv_schema *f);
/* What a reader of plan.json (`path`, parsed as j) checks before using it: the question's model,
 * cluster, constraints and SLO, and each answer's members, each of its type and range, as
 * moeperf-plan writes them (docs/planning.md, "plan.json"). MP_OK, or MP_ERR_USAGE after a message
 * naming the file and the member. */
int mp_plan_json_check(const struct cJSON *j, const char *path);
void mp_table_free(struct mp_table *t);
/* Column index by name, or -1. */
int mp_table_col(const struct mp_table *t, const char *name);
/* Key of row i as mp_row_key would build it from the first nkey cells. Heap string. */
char *mp_table_key(const struct mp_table *t, long i, int nkey);

/* Keys of rows already in `dir/name` (first nkey columns), for --resume. A missing file gives an
 * empty set. Returns MP_OK or MP_ERR_USAGE. */
struct mp_keyset {
    long n;
    char **keys;
};
int mp_keyset_load(const char *dir, const char *name, int nkey, struct mp_keyset *ks);
int mp_keyset_has(const struct mp_keyset *ks, const char *key);
void mp_keyset_add(struct mp_keyset *ks, const char *key);
void mp_keyset_free(struct mp_keyset *ks);

/* Rewrite `dir/name` keeping only rows whose key (first nkey cells) is in `keep`: drops the samples
 * of points that were cut before their summary row was written. Missing file: MP_OK. */
int mp_csv_filter(const char *dir, const char *name, int nkey, const struct mp_keyset *keep);

/* ---- run directory and run.json ---- */

/* mkdir -p. Errors name `flag` (e.g. "--out") and the path; returns MP_ERR_USAGE. */
int mp_mkdir_p(const char *path, const char *flag);

/* An output file `path`, given as `flag`, checked before anything is read or written: refused
 * (MP_ERR_USAGE after one line) when it is a directory, the same file as one of inputs[0..n)
 * (each a file or a run directory), a file a run wrote (run.json, a CSV file or the lock of a
 * directory holding a run.json), or the same file as `other` (another output of the command, or
 * NULL). "The same" is decided by realpath and by device and inode (hard links included). */
int mp_output_check(const char *flag, const char *path, const char *const *inputs, int n,
                    const char *other);

/* A new run.json object: tool, version, git revision, build configuration (features, compiler,
 * build type), argv, start time (ISO 8601 UTC), host name, timer kind, the NCCL_* / UCX_* / OMPI_*
 * / OPENBLAS_* environment, and the hwloc topology summary when built with hwloc. */
struct cJSON *mp_runjson_new(const char *tool, int argc, char **argv);
/* Set "end" to now and write dir/run.json atomically (mp_json_write). */
int mp_runjson_write(struct cJSON *j, const char *dir, int finished);
/* Write `j` to dir/name atomically (dir/.name.tmp, then rename). MP_OK or MP_ERR_RUNTIME after a
 * message naming the file. */
int mp_json_write(const struct cJSON *j, const char *dir, const char *name);

#endif
