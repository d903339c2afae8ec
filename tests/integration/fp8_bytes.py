# fp8_bytes.py - the byte balance of --dispatch-dtype bf16,fp8 sweeps, shared by the fp8 dispatch
# tests of the host and the GPU path: every point's dispatch bytes per link class are its rows ×
# (the packed fp8 row or the activation row, plus the dedup metadata) and come back as rows × the
# activation row in the combine; a rank's bytes_sent is the sum of its phases; the fp8 point moves
# the bf16 point's rows (the same tokens, routed alike) in fewer bytes.
import csv
import math

KEY = ["layout", "routing", "placement", "dispatch", "overlap", "dedup", "batch"]


def fp8_row(h):
    """Bytes of one packed fp8 row of h values: e4m3 codes and one fp32 scale per 128."""
    return h + 4 * math.ceil(h / 128)


def check(dirs, h, k, act):
    """Check every point of each run directory's layer_ranks.csv (activation rows of act bytes,
    top-k): returns (points checked, rank pairs compared, rank pairs that moved rows)."""
    fp8 = fp8_row(h)
    meta = {"pair": 0, "rank": 8 * k, "node": 8 * k}  # K·(int32 id + float weight)

    def b(r, phase, cls):  # a rank's bytes of one phase over one link class
        return float(r[f"{phase}_bytes_{cls}node"])

    checked = pairs = moved = 0
    for d in dirs:
        pts = {}
        for r in csv.DictReader(open(d + "/layer_ranks.csv")):
            pts.setdefault(tuple(r[c] for c in KEY), {}).setdefault(r["dispatch_dtype"], []).append(r)
        for key, v in pts.items():
            assert set(v) == {"bf16", "fp8"}, (d, key, set(v))
            m = meta[key[KEY.index("dedup")]]
            for dt, ranks in v.items():
                row = (fp8 if dt == "fp8" else act) + m
                for cls in ("intra", "inter"):
                    # every row dispatched over a link class comes back over it in the combine
                    disp = sum(b(r, "dispatch", cls) for r in ranks)
                    comb = sum(b(r, "combine", cls) for r in ranks)
                    assert disp * act == comb * row, (d, key, dt, cls, disp, comb)
                for r in ranks:
                    tot = sum(b(r, ph, c) for ph in ("dispatch", "combine") for c in ("intra", "inter"))
                    assert float(r["bytes_sent"]) == tot, (d, key, dt, r["rank"])
                checked += 1
            for x, y in zip(sorted(v["bf16"], key=lambda r: int(r["rank"])),
                            sorted(v["fp8"], key=lambda r: int(r["rank"]))):
                rows_moved = 0
                for cls in ("intra", "inter"):
                    assert b(y, "combine", cls) == b(x, "combine", cls), (d, key, cls)
                    rows = b(x, "dispatch", cls) / (act + m)
                    assert rows == int(rows) and b(y, "dispatch", cls) == rows * (fp8 + m), \
                        (d, key, cls, b(x, "dispatch", cls), b(y, "dispatch", cls))
                    rows_moved += rows
                pairs += 1
                moved += rows_moved > 0
    return checked, pairs, moved
