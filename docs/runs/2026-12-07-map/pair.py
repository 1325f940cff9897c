# Pairs each "_map" variant's timing with its "_tiled" twin (same axes otherwise) from one search database.
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
rows = {}
for name, tokens, status, med, p10, p90 in c.execute(
        "select v.kernel_name, m.tokens, m.status, m.median_us, m.p10_us, m.p90_us from measurements m "
        "join variants v on v.id = m.variant_id"):
    rows[(name, tokens)] = (status, med, p10, p90)
fails = [(n, t, s) for (n, t), (s, *_ ) in rows.items() if "_map" in n and s != "ok"]
for f in fails: print(sys.argv[2], "NOT OK", *f, sep="\t")
ratios = []
for (name, tokens), (status, med, p10, p90) in sorted(rows.items()):
    if "_map" not in name or status != "ok": continue
    twin = rows.get((name.replace("_map", "_tiled"), tokens))
    if not twin or twin[0] != "ok" or not twin[1]: continue
    ratios.append(twin[1] / med)
    print(sys.argv[2], tokens, name.replace("_map", "_{tiled|map}"), f"tiled {twin[1]:.1f} [{twin[2]:.1f},{twin[3]:.1f}]",
          f"map {med:.1f} [{p10:.1f},{p90:.1f}]", f"tiled/map {twin[1] / med:.3f}", sep="\t")
if ratios:
    ratios.sort()
    print(sys.argv[2], f"pairs {len(ratios)}: tiled/map median {ratios[len(ratios) // 2]:.3f} min {ratios[0]:.3f} max {ratios[-1]:.3f}", sep="\t")
best = {}
for (name, tokens), (status, med, *_ ) in rows.items():
    if status != "ok" or not med: continue
    kind = ("moe1" if "_moe1_" in name else "moe2" if "_moe2_" in name else "other", "map" if "_map" in name else "tiled" if "_tiled" in name else "plain")
    if kind not in best or med < best[kind][0]: best[kind] = (med, name)
for k, (med, name) in sorted(best.items()): print(sys.argv[2], "best", *k, f"{med:.1f}", name, sep="\t")
