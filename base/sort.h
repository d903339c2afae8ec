/* sort.h - the qsort comparators used in more than one place: doubles ascending, strings in
 * strcmp order. */
#ifndef MP_SORT_H
#define MP_SORT_H

/* qsort comparator of doubles, ascending (NaN compares equal to everything: keep NaN out). */
int mp_cmp_double(const void *a, const void *b);

/* qsort comparator of `const char *` elements, in strcmp order. */
int mp_cmp_str(const void *a, const void *b);

#endif
