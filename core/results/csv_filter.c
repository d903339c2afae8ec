/* csv_filter.c - a result file rewritten to keep only the rows whose key a set holds, replaced
 * atomically (results.h). */
#include "results.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "error.h"
#include "files.h"

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

/* A temporary file beside dir/name with path's mode, for writing (*tmp its heap path); MP_OK, or
 * MP_ERR_USAGE or MP_ERR_RUNTIME after a message. */
static int open_sibling(const char *dir, const char *name, const struct stat *st, char **tmp,
                        FILE **out)
{
    size_t dl = strlen(dir);
    *tmp = malloc(dl + strlen(name) + 16);
    if (!*tmp) {
        mp_error("out of memory");
        return MP_ERR_RUNTIME;
    }
    sprintf(*tmp, "%s%s.%s.XXXXXX", dir, dl && dir[dl - 1] != '/' ? "/" : "", name);
    int fd = mkstemp(*tmp);
    if (fd < 0 || !(*out = fdopen(fd, "w"))) {
        mp_usage("%s: cannot create a temporary file: %s", *tmp, strerror(errno));
        if (fd >= 0) {
            close(fd);
            unlink(*tmp);
        }
        free(*tmp);
        *tmp = NULL;
        return MP_ERR_USAGE;
    }
    fchmod(fileno(*out), st->st_mode & 07777);
    return MP_OK;
}

/* Copy the lines of `in` (path) to `out` (tmp): comments and the header always, a row when the
 * set holds its key; a last row cut by a kill ends the copy. MP_OK, or MP_ERR_USAGE (a row with
 * another number of cells than the header) or MP_ERR_RUNTIME after a message. */
static int copy_kept(FILE *in, const char *path, FILE *out, const char *tmp, int nkey,
                     const struct mp_keyset *keep)
{
    char *line = NULL;
    size_t cap = 0;
    int ncols = 0, rc = MP_OK;
    long lineno = 0;
    ssize_t got;
    while (rc == MP_OK && (got = getline(&line, &cap, in)) > 0) {
        size_t ll = (size_t)got;
        int complete = line[ll - 1] == '\n';
        lineno++;
        if (complete)
            ll--;
        size_t body = ll > 0 && line[ll - 1] == '\r' ? ll - 1 : ll;
        if (body == 0)
            continue;
        int keepit = 1; /* comments and the header stay */
        if (line[0] != '#' && ncols == 0) {
            ncols = count_cells(line, body);
        } else if (line[0] != '#') {
            int n = count_cells(line, body);
            if (n != ncols) {
                if (!complete)
                    break; /* a row cut by a kill */
                mp_usage("%s line %ld: %d cells, header has %d", path, lineno, n, ncols);
                rc = MP_ERR_USAGE;
                break;
            }
            size_t kl = mp_csv_key_len(line, body, nkey);
            char saved = line[kl];
            line[kl] = '\0';
            keepit = mp_keyset_has(keep, line);
            line[kl] = saved;
        }
        if (keepit && (fwrite(line, 1, ll, out) != ll || fputc('\n', out) == EOF)) {
            mp_error("%s: write failed: %s", tmp, strerror(errno));
            rc = MP_ERR_RUNTIME;
        }
    }
    if (rc == MP_OK && ferror(in)) {
        mp_error("%s: read failed: %s", path, strerror(errno));
        rc = MP_ERR_RUNTIME;
    }
    free(line);
    return rc;
}

int mp_csv_filter(const char *dir, const char *name, int nkey, const struct mp_keyset *keep)
{
    int rc = MP_OK;
    FILE *in = NULL, *out = NULL;
    char *path = mp_path_join(dir, name), *tmp = NULL;
    if (!path) {
        mp_error("out of memory");
        return MP_ERR_RUNTIME;
    }
    in = fopen(path, "r");
    if (!in) {
        if (errno != ENOENT) {
            mp_usage("%s: %s", path, strerror(errno));
            rc = MP_ERR_USAGE;
        }
        free(path);
        return rc;
    }
    struct stat st;
    int serr = fstat(fileno(in), &st) != 0 ? errno : S_ISDIR(st.st_mode) ? EISDIR : 0;
    if (serr) {
        mp_usage("%s: %s", path, strerror(serr));
        rc = MP_ERR_USAGE;
    }
    if (rc == MP_OK)
        rc = open_sibling(dir, name, &st, &tmp, &out);
    if (rc == MP_OK)
        rc = copy_kept(in, path, out, tmp, nkey, keep);
    if (rc == MP_OK && (fflush(out) != 0 || fsync(fileno(out)) != 0)) {
        mp_error("%s: write failed: %s", tmp, strerror(errno));
        rc = MP_ERR_RUNTIME;
    }
    if (out) {
        int ce = fclose(out);
        if (rc == MP_OK && (ce != 0 || rename(tmp, path) != 0)) {
            mp_error("%s: cannot replace with %s: %s", path, tmp, strerror(errno));
            rc = MP_ERR_RUNTIME;
        }
        if (rc != MP_OK)
            unlink(tmp);
    }
    free(tmp);
    fclose(in);
    free(path);
    return rc;
}
