"""timeline_check.py PNG - the per-rank timeline's drawing (plots/timeline.gp) holds its promise: in
each panel (median iteration on top, p99 below) the bar the red outline surrounds, the critical
rank's, has the longest busy part (pixels of the six phase colours, not the waits' grey). Prints
each panel's bars; exits non-zero when it does not hold."""
import sys

from png import decode

PHASES = {(0x56, 0xb4, 0xe9), (0xcc, 0x79, 0xa7), (0x00, 0x72, 0xb2), (0x00, 0x9e, 0x73),
          (0xe6, 0x9f, 0x00), (0xd5, 0x5e, 0x00)}


def check(path):
    w, h, rows = decode(path)
    plot_right = int(0.78 * w)  # the plots' right margin: the legend (its red key) lies beyond
    for top, bottom in ((0, h // 2), (h // 2, h)):
        busy = [sum(px in PHASES for px in rows[y][:plot_right]) for y in range(top, bottom)]
        red = [y for y in range(top, bottom) if (255, 0, 0) in rows[y][:plot_right]]
        assert red, f"no red outline in the panel at y {top}..{bottom}"
        bars, start = [], None  # bands of rows with phase pixels: (first, last, longest busy run)
        for i, b in enumerate(busy + [0]):
            if b and start is None:
                start = i
            elif not b and start is not None:
                bars.append((top + start, top + i - 1, max(busy[start:i])))
                start = None
        outlined = [bar for bar in bars if red[0] <= bar[0] and bar[1] <= red[-1]]
        assert len(outlined) == 1, \
            f"the red outline {red[0]}..{red[-1]} holds {len(outlined)} bars: {bars}"
        longest = max(bar[2] for bar in bars)
        print(f"panel {top}..{bottom}: {len(bars)} bars, busy pixels {[b[2] for b in bars]}, "
              f"outlined {outlined[0][2]}")
        # 3 px: two ranks busy within a few µs of each other (noise in the p99 iteration) may
        # rasterise either way round
        assert outlined[0][2] >= longest - 3, \
            f"the outlined bar ({outlined[0][2]} px) is not the longest ({longest} px)"


if __name__ == "__main__":
    check(sys.argv[1])
