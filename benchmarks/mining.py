"""Probing throughput: states probed per second at K = 4 and 8, batched generation against one-by-one generation
(one generate call per sampled action), on the same states and model, in one run.

    .venv/bin/python benchmarks/mining.py                       # fresh tiny model, synthetic shop-like states
    .venv/bin/python benchmarks/mining.py --checkpoint data/06_models/sft_model/<version>/sft_model \
        --states data/05_model_input/sft_states_train.parquet   # a trained policy on the corpus

An untrained model writes up to ``--max-new-tokens`` every time (the worst case); a trained one stops earlier.
Timings on a shared machine are noisy: compare the two modes of one run, not runs.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.fixtures_model: the synthetic states


def one_by_one(policy, states: pl.DataFrame, params) -> None:
    """The same work as ``probe_states`` with one generate call per sampled action."""
    from rmsweb_kedro.measures.mining import Sample, parse_history, reference_action, score_state

    for row in states.iter_rows(named=True):
        samples = [policy.sample([row], n=1, greedy=False)[0][0] for _ in range(params.scoring.k)]
        (best,) = policy.sample([row], n=1, greedy=True)[0]
        score_state(
            [Sample(s.action, s.error) for s in samples],
            Sample(best.action, best.error),
            reference_action(row),
            parse_history(row["previous_actions"]),
        )


def main() -> None:
    import torch

    from rmsweb_kedro.contracts.prompts import PromptConfig, build_messages
    from rmsweb_kedro.contracts.schema import STATE_SCHEMA
    from rmsweb_kedro.measures.probing import MiningParams, load_policy, probe_states
    from rmsweb_kedro.models.modeling import build_tiny_model, load_model

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", help="a checkpoint directory (default: a fresh tiny model)")
    parser.add_argument("--states", help="a STATE_SCHEMA parquet file (default: synthetic states)")
    parser.add_argument("--n-states", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=16, help="states a generate call (batched mode)")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    if args.states:
        states = pl.read_parquet(args.states).select(STATE_SCHEMA.names())
    else:
        from tests.fixtures_model import make_states

        states = pl.DataFrame(make_states(), schema=STATE_SCHEMA)
    states = states.head(args.n_states)
    prompt = PromptConfig()
    if args.checkpoint:
        model = load_model({"path": args.checkpoint})
    else:
        texts = [
            part["text"]
            for state in states.iter_rows(named=True)
            for message in build_messages(state, prompt, with_reference=True)[0]
            for part in message["content"]
        ]
        model = build_tiny_model(texts, {"vocab_size": 512})
    print(f"{states.height} states, max_new_tokens={args.max_new_tokens}, {args.threads} threads")
    print(f"{'K':>3} {'batched states/s':>17} {'one-by-one states/s':>20} {'ratio':>6}")
    for k in (4, 8):
        params = MiningParams.model_validate(
            {
                "scoring": {"k": k, "batch_size": args.batch_size, "max_new_tokens": args.max_new_tokens},
                "policy": {"prompt": prompt.model_dump()},
            }
        )
        policy = load_policy(model, params)
        started = time.perf_counter()
        probe_states(policy, states, params, progress=False)
        batched = states.height / (time.perf_counter() - started)
        started = time.perf_counter()
        one_by_one(policy, states, params)
        single = states.height / (time.perf_counter() - started)
        print(f"{k:>3} {batched:>17.2f} {single:>20.2f} {batched / single:>6.1f}")


if __name__ == "__main__":
    main()
