"""What an online evaluation of n paired episodes can detect: the minimum detectable effect (MDE) of a paired
difference of success at 80 % power and the report's 95 % confidence (``measures.reporting``: docs/evaluate.md,
"Power"), for n = 101, 156, 300, 532 and 1,596 episodes, and the episodes +3 points need. No model, seconds.

    .venv/bin/python benchmarks/power.py                       # discordances of this checkout's claims, if any
    .venv/bin/python benchmarks/power.py --claims docs/x.csv   # another claims table (claims_vs_run, ablation_claims)
    .venv/bin/python benchmarks/power.py --power 0.9

The MDE rests on the share of discordant pairs (one model alone succeeds): read off the claims tables of a run
(``data/08_reporting/evaluate/claims_vs_run.parquet``, ``data/08_reporting/ablations/ablation_claims.csv``: the
``k won by A alone, m by B alone`` of each Newcombe row), else typical shares 0.05-0.20 split evenly. Rows of 1,596
episodes read them as independent pairs; the report pools seeds by the two-way bootstrap (items and seeds resampled),
whose MDE the last table gives for 532 tasks x 3 seeds, simulated (seeded) with seeds that win the same tasks and
with seeds that win independently.

Measured 2026-12-07, 1 s of CPU (this checkout has no run: the typical shares, and RMSWeb - SFT's 11 + 6 discordant
of 156 episodes in docs/experiment.md, ``--discordance 0.0705,0.0385``): at that discordance (0.109) the MDE is 7.4
points at 156 episodes, 4.0 at 532 and 2.3 at 1,596 independent pairs, and +3 points need 942 pairs; pooled over 3
seeds on 532 tasks the report's two-way interval gives 4.0 (seeds alike) to 3.5 (seeds independent): resampling
the seeds counts their spread as chance, so 3 seeds are not 3 times the episodes.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EPISODES = (101, 156, 300, 532, 1596)
TYPICAL = (0.05, 0.10, 0.15, 0.20)
CLAIMS = (
    "data/08_reporting/evaluate/claims_vs_run.parquet",
    "data/08_reporting/ablations/ablation_claims.csv",
)
COUNTS = re.compile(r"(\d+) won by \S+ alone, (\d+) by \S+ alone")


def observed(paths: list[Path]) -> list[tuple[str, float, float]]:
    """``(label, p10, p01)`` of every Newcombe row of the claims tables at ``paths`` that exist."""
    import polars as pl

    from rmsweb_kedro.measures.reporting import PAIRED_INTERVAL

    rows = []
    for path in (p for p in paths if p.exists()):
        table = pl.read_parquet(path) if path.suffix == ".parquet" else pl.read_csv(path)
        for row in table.filter(pl.col("interval") == PAIRED_INTERVAL).iter_rows(named=True):
            found = COUNTS.search(row["measured_as"] or "")
            if found and row["n"]:
                seeds = f" (seed {row['seeds']})" if row.get("seeds") else ""
                b, c = (int(v) for v in found.groups())
                rows.append(
                    (f"{row['claim'][:60]}{seeds}, {b}+{c} of {row['n']}", b / row["n"], c / row["n"])
                )
    return rows


def pooled_mde(p10: float, p01: float, tasks: int, seeds: int, alike: bool, confidence: float, power: float):
    """Mean ``reporting.pooled_seeds_mde`` of 200 simulated ``(tasks, seeds)`` grids of paired differences (1 with
    p10, -1 with p01): every seed the same column (``alike``) or each its own draw."""
    import numpy as np

    from rmsweb_kedro.measures.reporting import pooled_seeds_mde

    rng = np.random.default_rng(0)
    draws = []
    for _ in range(200):
        grid = rng.choice([1.0, -1.0, 0.0], p=[p10, p01, 1 - p10 - p01], size=(tasks, 1 if alike else seeds))
        draws.append(pooled_seeds_mde(np.repeat(grid, seeds, axis=1) if alike else grid, confidence, power))
    return float(np.mean(draws))


def main() -> None:
    import polars as pl

    from rmsweb_kedro.measures.reporting import (
        discordance_sd,
        markdown_table,
        minimum_detectable_effect,
        pairs_needed,
    )

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--claims", nargs="*", type=Path, help=f"claims tables (default: {', '.join(CLAIMS)})"
    )
    parser.add_argument("--discordance", action="append", default=[], metavar="P10,P01",
                        help="a discordance to add: the shares won by the first model alone and the second alone")  # fmt: skip
    parser.add_argument("--confidence", type=float, default=0.95)
    parser.add_argument("--power", type=float, default=0.8)
    parser.add_argument("--effect", type=float, default=3.0, help="points to size the design for")
    args = parser.parse_args()

    shares = observed(args.claims if args.claims is not None else [ROOT / p for p in CLAIMS])
    source = (
        "observed in the claims tables" if shares else "typical shares (no claims table found), split evenly"
    )
    shares = shares or [(f"typical {d:.2f}", d / 2, d / 2) for d in TYPICAL]
    shares += [
        (f"given {p10},{p01}", p10, p01) for p10, p01 in (map(float, d.split(",")) for d in args.discordance)
    ]
    rows = []
    for label, p10, p01 in shares:
        sd = discordance_sd(p10, p01)
        mdes = {
            f"n={n}": 100 * minimum_detectable_effect(sd, n, args.confidence, args.power) for n in EPISODES
        }
        needed = pairs_needed(args.effect / 100, sd, args.confidence, args.power)
        rows.append({"discordance": label, "p10+p01": p10 + p01, **mdes, f"n for +{args.effect:g}": needed})
    print(
        f"MDE in points at {args.power:.0%} power, {args.confidence:.0%} two-sided; discordance {source}:\n"
    )
    print(markdown_table(pl.DataFrame(rows)))
    pooled = [
        {"discordance": label, "seeds alike": 100 * pooled_mde(p10, p01, 532, 3, True, args.confidence, args.power),
         "seeds independent": 100 * pooled_mde(p10, p01, 532, 3, False, args.confidence, args.power)}
        for label, p10, p01 in shares
    ]  # fmt: skip
    print("\nPooled over 3 seeds on 532 tasks, the report's two-way interval (reporting.pooled_seeds_mde):\n")
    print(markdown_table(pl.DataFrame(pooled)))


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "src"))
    main()
