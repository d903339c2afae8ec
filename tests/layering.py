#!/usr/bin/env python3
# layering.py - checks the layering rule on every #include "..." of the C, C++ and CUDA sources.
#
# The rule: includes point down only: base/ includes nothing of the project; kernels/ and comm/
# include base/ and their own directory; core/ includes base/, core/ and the backends' contract
# headers (kernels/compute.h, kernels/padded.h, comm/comm.h); bench/ and reports/ include what
# core/ may, core/ itself and their own directory; tests/ include anything, and nothing outside
# tests/ includes tests/.
#
# A quoted include is resolved as the compiler does (the including file's directory first, then
# the include path meson.build gives: '.', base, core, kernels, comm); config.h and git_rev.h, which
# the build generates, are allowed everywhere. Angle-bracket includes are left out (system and
# library headers). Usage: layering.py [SOURCE_ROOT]; exit 0 when every include keeps the rule,
# else 1 with one line per break: file:line: includes X: the rule it breaks.
import os
import re
import sys

SCANNED = ('base', 'kernels', 'comm', 'core', 'bench', 'reports', 'tests')
SOURCE_EXT = ('.c', '.h', '.cu', '.cuh', '.cc', '.hpp')
INCLUDE_PATH = ('.', 'base', 'core', 'kernels', 'comm')
# extra include directories some targets add (meson.build, tests/meson.build)
EXTRA_PATH = {'kernels/cuda': ('kernels/cuda',), 'tests': ('reports', 'tests/cudaemu/include', 'kernels/cuda')}
GENERATED = ('config.h', 'git_rev.h')
CONTRACT = ('kernels/compute.h', 'kernels/padded.h', 'comm/comm.h')
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def layer_of(path):
    """The top directory of a path relative to the root ('kernels' for kernels/cpu/x.c)."""
    return path.split('/', 1)[0]


def allowed(src, dst):
    """None when src may include dst (both relative to the root), else the rule broken."""
    a, b = layer_of(src), layer_of(dst)
    if a == 'tests':
        return None
    if b == 'tests':
        return 'nothing outside tests/ includes tests/'
    if a == 'base':
        return None if b == 'base' else 'base/ includes nothing of the project but base/'
    if a in ('kernels', 'comm'):
        return None if b in ('base', a) else '%s/ includes only base/ and %s/' % (a, a)
    core_may = b == 'base' or b == 'core' or dst in CONTRACT
    contract = ', '.join(CONTRACT)
    if a == 'core':
        return None if core_may else 'core/ includes only base/, core/ and ' + contract
    if a in ('bench', 'reports'):
        return None if core_may or b == a else \
            '%s/ includes only base/, core/, %s/ and %s' % (a, a, contract)
    return 'no rule for %s/' % a


def resolve(root, src, name):
    """The file (relative to root) that #include "name" in src finds, or None."""
    here = os.path.dirname(src)
    dirs = [here] + list(INCLUDE_PATH)
    for prefix, extra in EXTRA_PATH.items():
        if src.startswith(prefix + '/'):
            dirs += list(extra)
    for d in dirs:
        cand = os.path.normpath(os.path.join(d, name))
        if os.path.isfile(os.path.join(root, cand)):
            return cand
    return None


# The rule on a few pairs, checked before the tree, so a checker that lets everything through fails
CASES = (('base/files.c', 'base/error.h', True), ('base/error.c', 'core/stats.h', False),
         ('kernels/cpu/cpu_compute.c', 'kernels/topk.h', True),
         ('kernels/cuda/cuda_compute.cu', 'core/rankmap.h', False),
         ('kernels/dplan.c', 'comm/comm.h', False), ('comm/nccl.c', 'base/watchdog.h', True),
         ('comm/mpi.c', 'kernels/compute.h', False), ('core/layer.c', 'kernels/padded.h', True),
         ('core/layer.c', 'kernels/dplan.h', False), ('core/session.c', 'comm/comm.h', True),
         ('core/results.c', 'reports/report.h', False), ('bench/moeperf-a2a.c', 'core/plan.h', True),
         ('reports/plan.c', 'reports/plan.h', True), ('reports/report.c', 'bench/x.h', False),
         ('reports/report.c', 'kernels/chunks.h', False), ('core/layer.c', 'tests/unit/check.h', False),
         ('tests/unit/test_dplan.c', 'kernels/dplan.h', True))


def check(root):
    """Every break of the rule under root, as 'file:line: message' lines."""
    breaks = []
    for src, dst, ok in CASES:
        if (allowed(src, dst) is None) != ok:
            breaks.append('layering.py: the rule itself is wrong: %s including %s should be %s'
                          % (src, dst, 'allowed' if ok else 'refused'))
    seen = 0
    for top in SCANNED:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames.sort()
            for fn in sorted(filenames):
                if not fn.endswith(SOURCE_EXT):
                    continue
                src = os.path.relpath(os.path.join(dirpath, fn), root)
                with open(os.path.join(root, src), encoding='utf-8', errors='replace') as f:
                    lines = f.readlines()
                for ln, line in enumerate(lines, 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    name = m.group(1)
                    seen += 1
                    if os.path.basename(name) in GENERATED and '/' not in name:
                        continue
                    dst = resolve(root, src, name)
                    if dst is None:
                        if layer_of(src) != 'tests':
                            breaks.append('%s:%d: includes "%s", which is no file of the '
                                          'include path' % (src, ln, name))
                        continue
                    why = allowed(src, dst)
                    if why:
                        breaks.append('%s:%d: includes %s: %s' % (src, ln, dst, why))
    if seen < 100:
        breaks.append('layering.py: only %d quoted includes under %s: not the source root?'
                      % (seen, root))
    return breaks


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '..')
    root = os.path.abspath(root)
    if not os.path.isdir(os.path.join(root, 'base')):
        print('layering.py: %s is not the source root (no base/)' % root, file=sys.stderr)
        return 2
    breaks = check(root)
    for b in breaks:
        print(b)
    if breaks:
        print('layering: %d include(s) break the rule (see the header of tests/layering.py)'
              % len(breaks))
        return 1
    print('layering: every #include "..." keeps the rule')
    return 0


if __name__ == '__main__':
    sys.exit(main())
