/* text.h - the small string helpers the key=value file readers (models, cluster profiles) share. */
#ifndef MP_TEXT_H
#define MP_TEXT_H

#include <ctype.h>
#include <stdio.h>
#include <string.h>

/* Strip leading and trailing white space in place; returns the first non-space character. */
static inline char *mp_trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = '\0';
    return s;
}

/* Split one line of a key=value file in place: '#' starts a comment, white space around the key
 * and the value is dropped. Returns 0 when nothing is left (a blank or comment line), 1 with *key
 * and *value set, or -1 when what is left has no '=' (*key then points at it, for the message). */
static inline int mp_kv_split(char *line, char **key, char **value)
{
    char *hash = strchr(line, '#');
    if (hash)
        *hash = '\0';
    char *s = mp_trim(line);
    *key = s;
    *value = NULL;
    if (!*s)
        return 0;
    char *eq = strchr(s, '=');
    if (!eq)
        return -1;
    *eq = '\0';
    *key = mp_trim(s);
    *value = mp_trim(eq + 1);
    return 1;
}

/* The file name of `path` without its directories and extension ("custom" if that is empty), the
 * default name of a model or profile read from a file. */
static inline void mp_file_stem(const char *path, char *out, size_t len)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    snprintf(out, len, "%s", base);
    char *dot = strrchr(out, '.');
    if (dot && dot != out)
        *dot = '\0';
    if (!out[0])
        snprintf(out, len, "custom");
}

#endif
