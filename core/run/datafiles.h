/* srcroot.h - where the source tree a reports tool was built from lies (its plots/render,
 * plots/figures.csv and tests/published/validation.csv are read from there). */
#ifndef MP_SRCROOT_H
#define MP_SRCROOT_H

#include <stddef.h>

/* The source tree this binary was built from: the parent of the build directory when the build
 * directory lies inside it (build/reports/TOOL), else the "source" directory recorded in the build
 * directory's meson-info/meson-info.json; either must hold plots/render. Returns 0 and fills
 * root, or -1. */
int rp_source_root(char *root, size_t size);

#endif
