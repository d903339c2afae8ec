#!/usr/bin/env python3
"""rewrite.py - turns a .cu file into C++ for the CPU stand-in: each `kernel<<<config>>>(args)`
becomes `cudaemu_launch("kernel", coop, kernel, config)(args)`, where coop says whether the kernel
calls __syncthreads (itself or through a __device__ function that does), `extern __shared__ T
name[];` becomes the launch's dynamic shared memory, and `#pragma unroll` (nvcc's, unknown to the
host compiler) an empty line, and a `const __grid_constant__ T name` parameter a const reference
to the launch's one copy of it (each emulated thread would otherwise copy the whole parameter).
Line numbers are kept, and a #line directive names the .cu file in compiler messages.
Usage: rewrite.py IN.cu OUT.cc"""
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


def main():
    path, out = sys.argv[1], sys.argv[2]
    src = open(path, encoding='utf-8').read()
    helpers = barrier_functions(src)
    coop = {k: '__syncthreads' in body or any(re.search(rf'\b{h}\s*[<(]', body) for h in helpers)
            for k, body in kernel_bodies(src).items()}

    def launch(m):
        name = m.group(1)
        if name not in coop:
            sys.exit(f'{path}: launch of {name}, which is not a __global__ function here')
        return f'cudaemu_launch("{name}", {"true" if coop[name] else "false"}, {name}, {m.group(2)})('

    text = re.sub(r'(\w+)\s*<<<(.*?)>>>\s*\(', launch, src, flags=re.S)
    text = re.sub(r'extern\s+__shared__\s+([\w\s]+?)\s*(\w+)\s*\[\s*\]\s*;',
                  r'\1 *\2 = (\1 *)cudaemu::dynamic_shared();', text)
    text = re.sub(r'^[ \t]*#[ \t]*pragma[ \t]+unroll\b.*$', '', text, flags=re.M)
    text = re.sub(r'\bconst\s+__grid_constant__\s+((?:struct\s+)?\w+)\s+(\w+)', r'const \1 &\2', text)
    with open(out, 'w', encoding='utf-8') as f:
        f.write(f'#line 1 "{path}"\n' + text)


if __name__ == '__main__':
    main()
