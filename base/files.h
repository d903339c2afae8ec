/* files.h - path joining and whole-file reading, the file helpers the results writers and the
 * report tools share. */
#ifndef MP_FILES_H
#define MP_FILES_H

#include <stddef.h>

/* "dir/name" in a new heap string (no second '/' when dir ends with one; just `name` when dir is
 * empty). NULL when out of memory (errno ENOMEM); the caller frees it. */
char *mp_path_join(const char *dir, const char *name);

/* The whole file at `path` in a new NUL-terminated heap buffer, its length (without the NUL) in
 * *len when len is not NULL. NULL on failure with errno saying why (the file's open or read
 * error, or ENOMEM); the caller frees it. */
char *mp_read_file(const char *path, size_t *len);

/* 1 when `path` names a regular file (following symbolic links), else 0. */
int mp_is_regular_file(const char *path);

/* How many entries directory `dir` holds besides "." and "..", counting at most to 1: 0 (empty)
 * or 1; -1 with errno when it cannot be read. */
int mp_dir_has_entries(const char *dir);

/* Remove everything inside directory `dir` (files, links and folders, depth first, following no
 * symbolic link), leaving `dir` itself and its entry named `keep` (NULL: none). 0, or -1 with
 * errno and the path that failed in `failed` (len bytes). */
int mp_remove_contents(const char *dir, const char *keep, char *failed, size_t len);

#endif
