/* sort.h - the qsort comparators used in more than one place (doubles ascending, strings in
 * strcmp order) and the binary search of a sorted list of strings. */
#ifndef MP_SORT_H
#define MP_SORT_H

/* qsort comparator of doubles, ascending (NaN compares equal to everything: keep NaN out). */
int mp_cmp_double(const void *a, const void *b);

/* qsort comparator of `const char *` elements, in strcmp order. */
int mp_cmp_str(const void *a, const void *b);

/* Binary search for `key` among n strings in strcmp order, the i-th being key_at(i, arg): its
 * index, or -(insertion point) - 1 when absent. */
long mp_find_sorted(const char *key, long n, const char *(*key_at)(long i, const void *arg),
                    const void *arg);

#endif
