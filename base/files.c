/* files.c - path joining, whole-file reading and clearing a directory (files.h). */
#define _XOPEN_SOURCE 700 /* nftw */
#include "files.h"

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

char *mp_path_join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (!p) {
        errno = ENOMEM;
        return NULL;
    }
    memcpy(p, dir, a);
    size_t n = a;
    if (a > 0 && dir[a - 1] != '/')
        p[n++] = '/';
    memcpy(p + n, name, b + 1);
    return p;
}

char *mp_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 65536, n = 0;
    char *b = malloc(cap);
    if (!b)
        errno = ENOMEM;
    while (b) {
        if (n + 1 >= cap) {
            char *nb = realloc(b, cap * 2);
            if (!nb) {
                free(b);
                b = NULL;
                errno = ENOMEM;
                break;
            }
            b = nb;
            cap *= 2;
        }
        size_t got = fread(b + n, 1, cap - 1 - n, f);
        n += got;
        if (got == 0) {
            if (ferror(f)) {
                int e = errno ? errno : EIO;
                free(b);
                b = NULL;
                errno = e;
            }
            break;
        }
    }
    fclose(f);
    if (!b)
        return NULL;
    b[n] = '\0';
    if (len)
        *len = n;
    return b;
}

int mp_is_regular_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int mp_dir_has_entries(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    errno = 0;
    while (n == 0 && (e = readdir(d)) != NULL)
        n = strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    int err = n == 0 ? errno : 0;
    closedir(d);
    errno = err;
    return err ? -1 : n;
}

static char *clear_failed; /* nftw's callback takes no argument: where it names what failed */
static size_t clear_failed_len;
static const char *clear_keep; /* and the name it keeps at the top */

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    if (ftw->level == 0) /* the directory itself stays */
        return 0;
    if (ftw->level == 1 && clear_keep && !strcmp(path + ftw->base, clear_keep))
        return 0;
    if (remove(path) == 0)
        return 0;
    if (clear_failed && clear_failed_len)
        snprintf(clear_failed, clear_failed_len, "%s", path);
    return -1;
}

int mp_remove_contents(const char *dir, const char *keep, char *failed, size_t len)
{
    clear_keep = keep;
    clear_failed = failed;
    clear_failed_len = len;
    if (failed && len)
        snprintf(failed, len, "%s", dir);
    int rc = nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
    return rc == 0 ? 0 : -1;
}
