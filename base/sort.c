/* sort.c - the shared qsort comparators and sorted-string search (sort.h). */
#include "sort.h"

#include <string.h>

int mp_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int mp_cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

long mp_find_sorted(const char *key, long n, const char *(*key_at)(long i, const void *arg),
                    const void *arg)
{
    long lo = 0, hi = n;
    while (lo < hi) {
        long mid = lo + (hi - lo) / 2;
        int c = strcmp(key_at(mid, arg), key);
        if (c == 0)
            return mid;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -lo - 1;
}
