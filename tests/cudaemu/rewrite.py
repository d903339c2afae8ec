#!/usr/bin/env python3
"""rewrite.py - turns a .cu file into C++ for the CPU stand-in: each `kernel<<<config>>>(args)`
becomes `cudaemu_launch("kernel", coop, kernel, config)(args)`, where coop says whether the kernel
calls __syncthreads (itself or through a __device__ function that does), `extern __shared__ T
name[];` becomes the launch's dynamic shared memory, and `#pragma unroll` (nvcc's, unknown to the
host compiler) an empty line, and a `const __grid_constant__ T name` parameter a const reference
to the launch's one copy of it (each emulated thread would otherwise copy the whole parameter).
A launch through a pointer to a kernel (a name that is no __global__ function) finds the kernel's
name and coop at run time among the file's kernels. The private headers of the file's folder that
it includes (#include "NAME_internal.h", each once) are rewritten with it, in place of their
#include, since their device functions may hold barriers and nvcc's pragmas.
Line numbers are kept, and #line directives name the .cu file and its headers in compiler messages.
Usage: rewrite.py IN.cu OUT.cc [DEPFILE] (DEPFILE: OUT's dependencies, the headers rewritten in)"""
import os
import re
import sys


def kernel_bodies(src):
    """Names of the __global__ functions, mapped to their bodies' text."""
    bodies = {}
    kernel = r'__global__\s+void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)\s*\('
    for m in re.finditer(kernel, src):
        open_at = src.index('{', m.end())
        depth, i = 0, open_at
        while True:
            if src[i] == '{':
                depth += 1
            elif src[i] == '}':
                depth -= 1
                if depth == 0:
                    break
            i += 1
        bodies[m.group(1)] = src[open_at:i + 1]
    return bodies


def barrier_functions(src):
    """Names of the __device__ functions (templates too) whose bodies call __syncthreads, themselves
    or through other such functions."""
    bodies = {}
    for m in re.finditer(r'__device__[^;{(]*?\b(\w+)\s*\([^;{]*\)\s*\{', src):
        depth, i = 0, m.end() - 1
        while True:
            depth += {'{': 1, '}': -1}.get(src[i], 0)
            if depth == 0:
                break
            i += 1
        bodies[m.group(1)] = bodies.get(m.group(1), '') + src[m.end():i]
    names = {n for n, body in bodies.items() if '__syncthreads' in body}
    while True:
        more = {n for n, body in bodies.items()
                if n not in names and any(re.search(rf'\b{h}\s*[<(]', body) for h in names)}
        if not more:
            return names
        names |= more


def inline_private(path, text, seen):
    """text (the file `path`) with each #include of a private header of its folder replaced by the
    header's own text (expanded likewise), between #line directives; a header seen before becomes
    an empty line."""
    out = []
    for n, line in enumerate(text.split('\n'), 1):
        m = re.match(r'\s*#\s*include\s+"(\w+_internal\.h)"', line)
        header = m and os.path.join(os.path.dirname(path), m.group(1))
        if not header or not os.path.isfile(header):
            out.append(line)
        elif header in seen:
            out.append('')
        else:
            seen.append(header)
            body = inline_private(header, open(header, encoding='utf-8').read(), seen)
            out += [f'#line 1 "{header}"', body, f'#line {n + 1} "{path}"']
    return '\n'.join(out)


def main():
    path, out = sys.argv[1], sys.argv[2]
    headers = []
    src = inline_private(path, open(path, encoding='utf-8').read(), headers)
    helpers = barrier_functions(src)
    coop = {k: '__syncthreads' in body or any(re.search(rf'\b{h}\s*[<(]', body) for h in helpers)
            for k, body in kernel_bodies(src).items()}
    through_pointer = False

    def launch(m):
        nonlocal through_pointer
        name = m.group(1)
        if name not in coop:  # a pointer to one of the file's kernels
            through_pointer = True
            info = f'cudaemu_kernel_of((const void *){name})'
            return f'cudaemu_launch({info}.name, {info}.coop, {name}, {m.group(2)})('
        return f'cudaemu_launch("{name}", {"true" if coop[name] else "false"}, {name}, {m.group(2)})('

    text = re.sub(r'(\w+)\s*<<<(.*?)>>>\s*\(', launch, src, flags=re.S)
    text = re.sub(r'extern\s+__shared__\s+([\w\s]+?)\s*(\w+)\s*\[\s*\]\s*;',
                  r'\1 *\2 = (\1 *)cudaemu::dynamic_shared();', text)
    text = re.sub(r'^[ \t]*#[ \t]*pragma[ \t]+unroll\b.*$', '', text, flags=re.M)
    text = re.sub(r'\bconst\s+__grid_constant__\s+((?:struct\s+)?\w+)\s+(\w+)', r'const \1 &\2', text)
    head, tail = '', ''
    if through_pointer:  # the kernels' names and coop, for the launches through pointers
        head = ('struct cudaemu_kernel_info { const char *name; bool coop; };\n'
                'static cudaemu_kernel_info cudaemu_kernel_of(const void *k);\n')
        tail = (f'\n#line 1 "rewrite.py: the kernels of {path}"\n'
                '[[maybe_unused]] static cudaemu_kernel_info cudaemu_kernel_of(const void *k)\n{\n'
                + ''.join(f'    if (k == (const void *)&{k})\n        return {{"{k}", '
                          f'{"true" if c else "false"}}};\n' for k, c in coop.items())
                + '    cudaemu::fault("a launch through a pointer to no kernel of %s", '
                f'"{path}");\n}}\n')
    with open(out, 'w', encoding='utf-8') as f:
        f.write(head + f'#line 1 "{path}"\n' + text + tail)
    if len(sys.argv) > 3:
        with open(sys.argv[3], 'w', encoding='utf-8') as f:
            f.write(f'{out}: {path} {" ".join(headers)}\n')


if __name__ == '__main__':
    main()
