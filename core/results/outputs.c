/* outputs.c - an output path refused when writing it would destroy what the command reads, or
 * what a run measured (mp_output_check, results.h). */
#define _XOPEN_SOURCE 700 /* realpath */
#include "results.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "error.h"
#include "files.h"
#include "runlock.h"

#define RESOLVED (2 * PATH_MAX)

/* `path` made absolute into out[RESOLVED]: realpath where it exists, else its directory's
 * realpath and its own name (a file about to be created), else as given. */
static void resolve(const char *path, char *out)
{
    if (realpath(path, out))
        return;
    const char *slash = strrchr(path, '/'), *name = slash ? slash + 1 : path;
    char dir[PATH_MAX], real[PATH_MAX];
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == path)
        snprintf(dir, sizeof dir, "/");
    else
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    if (realpath(dir, real))
        snprintf(out, RESOLVED, "%s/%s", strcmp(real, "/") ? real : "", name);
    else
        snprintf(out, RESOLVED, "%s", path);
}

/* Whether the existing file `real` (resolved) is one a run wrote: run.json, a CSV file or the lock, in a
 * directory that holds a run.json. */
static int run_file(const char *real)
{
    const char *name = strrchr(real, '/');
    name = name ? name + 1 : real;
    size_t n = strlen(name);
    if (strcmp(name, "run.json") != 0 && strcmp(name, MP_RUNLOCK_FILE) != 0 &&
        (n < 4 || strcmp(name + n - 4, ".csv") != 0))
        return 0;
    char dir[RESOLVED + 16];
    snprintf(dir, sizeof dir, "%.*s/run.json", (int)(name - real - 1), real);
    struct stat st;
    return stat(dir, &st) == 0 && S_ISREG(st.st_mode);
}

static int same_inode(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

/* Whether the file of st is input `in` itself or, when `in` is a directory, one of the files in
 * it (a hard link to a run's file, made elsewhere, is still that file). */
static int same_file(const struct stat *st, const char *in)
{
    struct stat is;
    if (stat(in, &is) != 0)
        return 0;
    if (same_inode(&is, st))
        return 1;
    if (!S_ISDIR(is.st_mode))
        return 0;
    DIR *d = opendir(in);
    struct dirent *e;
    int same = 0;
    while (d && !same && (e = readdir(d)) != NULL) {
        char *p = mp_path_join(in, e->d_name);
        same = p && stat(p, &is) == 0 && S_ISREG(is.st_mode) && same_inode(&is, st);
        free(p);
    }
    if (d)
        closedir(d);
    return same;
}

int mp_output_check(const char *flag, const char *path, const char *const *inputs, int n,
                    const char *other)
{
    char real[RESOLVED], in[RESOLVED];
    struct stat st, is;
    resolve(path, real);
    int exists = stat(path, &st) == 0;
    if (exists && S_ISDIR(st.st_mode)) {
        mp_usage("%s '%s': is a directory; give a file name", flag, path);
        return MP_ERR_USAGE;
    }
    for (int i = 0; i < n; i++) {
        resolve(inputs[i], in);
        if (!strcmp(in, real) || (exists && same_file(&st, inputs[i]))) {
            mp_usage("%s '%s': is the input '%s' of this command, or a file in it, which writing "
                     "it would destroy; give another file", flag, path, inputs[i]);
            return MP_ERR_USAGE;
        }
    }
    if (exists && run_file(real)) {
        mp_usage("%s '%s': is a file of the run in its directory, which writing it would destroy; "
                 "give another file", flag, path);
        return MP_ERR_USAGE;
    }
    if (other) {
        resolve(other, in);
        if (!strcmp(in, real) || (exists && stat(other, &is) == 0 && same_inode(&is, &st))) {
            mp_usage("%s '%s': is also another output of this command ('%s'); give each its own "
                     "file", flag, path, other);
            return MP_ERR_USAGE;
        }
    }
    return MP_OK;
}
