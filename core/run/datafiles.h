/* datafiles.h - where the tools find their data files: plots/ (render, the gnuplot scripts,
 * figures.csv, the seed figures) and tests/published/validation.csv, in the source tree or where
 * meson installs them. */
#ifndef MP_DATAFILES_H
#define MP_DATAFILES_H

#include <stddef.h>

/* The environment variable that names a data root, before any other. */
#define MP_DATA_ENV "MOEPERF_DATADIR"

/* The directory that holds plots/render (and beside it tests/published/), into root (size bytes):
 * $MOEPERF_DATADIR when set; else the source tree this binary was built from (the parent of the
 * build directory when the build directory lies inside it, else the "source" directory recorded
 * in the build directory's meson-info/meson-info.json); else the data directory meson installs
 * them in (MOEPERF_DATADIR of config.h: PREFIX/share/moeperf). The first that holds plots/render
 * is taken. Returns 0 and fills root, or -1 (root then names the installed data directory, for a
 * message). */
int mp_data_root(char *root, size_t size);

#endif
