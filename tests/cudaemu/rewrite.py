#!/usr/bin/env python3
"""rewrite.py - turns a .cu file into C++ for the CPU stand-in: each `kernel<<<config>>>(args)`
becomes `cudaemu_launch("kernel", coop, kernel, config)(args)`, where coop says whether the kernel
calls __syncthreads, and `extern __shared__ T name[];` becomes the launch's dynamic shared memory.
Line numbers are kept, and a #line directive names the .cu file in compiler messages.
Usage: rewrite.py IN.cu OUT.cc"""
import re
import sys


def kernel_bodies(src):
    """Names of the __global__ functions, mapped to their bodies' text."""
    bodies = {}
    for m in re.finditer(r'__global__\s+void\s+(\w+)\s*\(', src):
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


def main():
    path, out = sys.argv[1], sys.argv[2]
    src = open(path, encoding='utf-8').read()
    coop = {k: '__syncthreads' in body for k, body in kernel_bodies(src).items()}

    def launch(m):
        name = m.group(1)
        if name not in coop:
            sys.exit(f'{path}: launch of {name}, which is not a __global__ function here')
        return f'cudaemu_launch("{name}", {"true" if coop[name] else "false"}, {name}, {m.group(2)})('

    text = re.sub(r'(\w+)\s*<<<(.*?)>>>\s*\(', launch, src, flags=re.S)
    text = re.sub(r'extern\s+__shared__\s+([\w\s]+?)\s*(\w+)\s*\[\s*\]\s*;',
                  r'\1 *\2 = (\1 *)cudaemu::dynamic_shared();', text)
    with open(out, 'w', encoding='utf-8') as f:
        f.write(f'#line 1 "{path}"\n' + text)


if __name__ == '__main__':
    main()
