#!/usr/bin/env python3
# layering.py - checks the layering rule on every #include "..." of the C, C++ and CUDA sources.
#
# The rule: includes point down only: base/ includes nothing of the project; kernels/ and comm/
# include base/ and their own directory; core/ includes base/, core/ and the backends' contract
# headers (kernels/compute.h, kernels/padded.h, comm/comm.h); bench/, reports/ and planner/ include
# what core/ may, core/ itself and their own directory; tests/ include anything, and nothing outside
# tests/ includes tests/. A private header (NAME_internal.h) is included only from its own folder.
# No circle of files: a file's unit is its path without the extension (x.c, x.h and x_internal.h
# are one unit),
# and no unit reaches itself through the includes of the units it includes. Every header's include
# guard (its first #ifndef) is its own.
#
# A quoted include is resolved as the compiler does (the including file's directory first, then
# the include path meson.build gives: '.', base, kernels, comm and core's rooms); config.h and git_rev.h, which
# the build generates, are allowed everywhere. Angle-bracket includes are left out (system and
# library headers). Usage: layering.py [SOURCE_ROOT]; exit 0 when every include keeps the rule,
# else 1 with one line per break: file:line: includes X: the rule it breaks.
import os
import re
import sys

SCANNED = ('base', 'kernels', 'comm', 'core', 'bench', 'reports', 'planner', 'tests')
TOOLS = ('bench', 'reports', 'planner')
CORE_ROOMS = ('core/workload', 'core/layer', 'core/cluster_model', 'core/results', 'core/run')
SOURCE_EXT = ('.c', '.h', '.cu', '.cuh', '.cc', '.hpp')
INCLUDE_PATH = ('.', 'base', 'kernels', 'comm') + CORE_ROOMS
# extra include directories some targets add (meson.build, tests/meson.build)
EXTRA_PATH = {'kernels/cuda': ('kernels/cuda',),
              'tests': ('reports', 'planner', 'tests/cudaemu/include', 'kernels/cuda')}
GENERATED = ('config.h', 'git_rev.h')
CONTRACT = ('kernels/compute.h', 'kernels/padded.h', 'comm/comm.h')
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
GUARD = re.compile(r'^\s*#\s*ifndef\s+(\w+)')


def layer_of(path):
    """The top directory of a path relative to the root ('kernels' for kernels/cpu/x.c)."""
    return path.split('/', 1)[0]


def allowed(src, dst):
    """None when src may include dst (both relative to the root), else the rule broken."""
    a, b = layer_of(src), layer_of(dst)
    if dst.endswith('_internal.h') and os.path.dirname(src) != os.path.dirname(dst):
        return 'a private header is included only from its own folder (%s/)' % os.path.dirname(dst)
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
    if a in TOOLS:
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


def unit_of(path):
    """A file's unit: its path without the extension and a private header's _internal
    (core/layer/layer.c, layer.h and layer_internal.h are one)."""
    base = os.path.splitext(path)[0]
    return base[:-len('_internal')] if base.endswith('_internal') else base


def circles(edges):
    """The strongly connected groups of more than one unit in `edges` (unit -> set of units), each
    as a sorted list (Tarjan's algorithm, iterative)."""
    index, low, on, stack, found, counter = {}, {}, set(), [], [], [0]
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                group = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    group.append(w)
                    if w == v:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


# The rule on a few pairs, checked before the tree, so a checker that lets everything through fails
CASES = (('base/files.c', 'base/error.h', True), ('base/error.c', 'core/results/stats.h', False),
         ('kernels/cpu/cpu_compute.c', 'kernels/topk.h', True),
         ('kernels/cuda/cuda_compute.cu', 'core/run/rankmap.h', False),
         ('kernels/dplan.c', 'comm/comm.h', False), ('comm/nccl.c', 'base/watchdog.h', True),
         ('comm/mpi.c', 'kernels/compute.h', False), ('core/layer/layer.c', 'kernels/padded.h', True),
         ('core/layer/dispatch_padded.c', 'core/layer/layer_internal.h', True),
         ('core/cluster_model/vexec.c', 'core/layer/layer_internal.h', False),
         ('tests/unit/test_layer.c', 'core/layer/layer_internal.h', False),
         ('planner/moeperf-plan.c', 'planner/capacity_plan.h', True),
         ('reports/report.c', 'planner/capacity_plan.h', False),
         ('core/layer/layer.c', 'kernels/dplan.h', False), ('core/run/session.c', 'comm/comm.h', True),
         ('core/results/results.c', 'reports/report.h', False), ('bench/moeperf-a2a.c', 'core/layer/dispatch_plan.h', True),
         ('planner/capacity_plan.c', 'planner/capacity_plan.h', True), ('reports/report.c', 'bench/x.h', False),
         ('reports/report.c', 'kernels/chunks.h', False), ('core/layer/layer.c', 'tests/unit/check.h', False),
         ('tests/unit/test_dplan.c', 'kernels/dplan.h', True))


def check(root):
    """Every break of the rule under root, as 'file:line: message' lines."""
    breaks = []
    if circles({'a': {'b'}, 'b': {'c'}, 'c': {'a'}, 'd': {'a'}}) != [['a', 'b', 'c']] or \
            circles({'a': {'b'}, 'b': set()}):
        breaks.append('layering.py: the circle finder itself is wrong')
    for src, dst, ok in CASES:
        if (allowed(src, dst) is None) != ok:
            breaks.append('layering.py: the rule itself is wrong: %s including %s should be %s'
                          % (src, dst, 'allowed' if ok else 'refused'))
    seen = 0
    edges = {}
    guards = {}
    for top in SCANNED:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames.sort()
            for fn in sorted(filenames):
                if not fn.endswith(SOURCE_EXT):
                    continue
                src = os.path.relpath(os.path.join(dirpath, fn), root)
                with open(os.path.join(root, src), encoding='utf-8', errors='replace') as f:
                    lines = f.readlines()
                if fn.endswith(('.h', '.cuh')):
                    guard = next((g.group(1) for g in map(GUARD.match, lines) if g), None)
                    if guard and guard in guards:
                        breaks.append('%s: include guard %s is also %s\'s' % (src, guard, guards[guard]))
                    elif guard:
                        guards[guard] = src
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
                    if layer_of(src) != 'tests' and unit_of(src) != unit_of(dst):
                        edges.setdefault(unit_of(src), set()).add(unit_of(dst))
    for circle in circles(edges):
        breaks.append('a circle of files: %s' % ' -> '.join(circle + circle[:1]))
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
