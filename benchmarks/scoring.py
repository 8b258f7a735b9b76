"""Scoring throughput: scored states per second with the ``hf`` policy (the checkpoint in this process, batched
``generate``) against the ``openai`` policy (the same checkpoint behind the project's local OpenAI-compatible
server, one request per state), greedy only (K = 0) and with K sampled replies, on the same states, in one run.

    .venv/bin/python benchmarks/scoring.py                      # fresh tiny model, synthetic shop-like states
    .venv/bin/python benchmarks/scoring.py --checkpoint data/06_models/sft_model/<version>/sft_model \
        --states data/05_model_input/sft_states_val.parquet     # a trained policy on real states
    .venv/bin/python benchmarks/scoring.py --base-url http://127.0.0.1:8000/v1 --model rmsweb  # a vLLM server

Both policies prompt as SFT trained: the prompt of ``sft.training.prompt`` (``${globals:policy_prompt}``,
conf/base/globals.yml), not ``PromptConfig()``'s defaults; scoring a checkpoint with another prompt than it was
trained on measures the mismatch, not the model (issue 39: the default SFT checkpoint scored 0.30 step success
with `PromptConfig()`, 0.55 with its own prompt, on the same 20 states).

The local server generates one request at a time (a stand-in for vLLM's protocol, not for its batching), so here
the ratio measures what the HTTP path costs on top of generation; against vLLM on a GPU, ``batch_size`` requests in
flight are batched by the server. Timings on a shared machine are noisy: compare the two kinds of one run.
Measured 2026-12-03 here, still with ``PromptConfig()`` (2 loaded cores, 1 torch thread, fresh tiny model, 8 states,
24 new tokens): greedy 2.14 states/s in process vs 0.60 served (3.6x); K = 2: 1.09 vs 0.19 (5.8x); the greedy replies
were identical.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.*: the synthetic states and local server


def trained_prompt(env: str | None):
    """The prompt SFT trains with (``sft.training.prompt`` of the project's configuration, ``env`` over base)."""
    from kedro.config import OmegaConfigLoader

    from rmsweb_kedro.contracts.prompts import PromptConfig
    from rmsweb_kedro.settings import CONFIG_LOADER_ARGS

    loader = OmegaConfigLoader(
        str(ROOT / "conf"), **{**CONFIG_LOADER_ARGS, "default_run_env": "base"}, env=env
    )
    return PromptConfig.model_validate(loader["parameters"]["sft"]["training"]["prompt"])


def main() -> None:
    import polars as pl
    import torch

    from rmsweb_kedro.agents.factory import build_policy
    from rmsweb_kedro.contracts.prompts import build_messages
    from rmsweb_kedro.contracts.schema import STATE_SCHEMA
    from rmsweb_kedro.measures.scoring import ScoringConfig, rates, score_states
    from rmsweb_kedro.models.modeling import build_tiny_model, save_checkpoint
    from tests.collect.local_openai_server import LocalChatServer

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", help="a checkpoint directory (default: a fresh tiny model)")
    parser.add_argument("--states", help="a STATE_SCHEMA parquet file (default: synthetic states)")
    parser.add_argument("--n-states", type=int, default=16)
    parser.add_argument("--k", type=int, default=4, help="sampled replies per state in the second pass")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=24)
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads (1: steadiest on a shared machine)"
    )
    parser.add_argument(
        "--base-url", help="an already running server of the checkpoint (default: the local one)"
    )
    parser.add_argument("--model", default=None, help="its served model name")
    parser.add_argument(
        "--env", default=None, help="Kedro configuration environment of the prompt (default: base)"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    if args.states:
        states = pl.read_parquet(args.states).select(STATE_SCHEMA.names()).head(args.n_states).to_dicts()
    else:
        from tests.fixtures_model import make_states

        states = make_states()[: args.n_states]
    prompt = trained_prompt(args.env)
    work = tempfile.TemporaryDirectory()
    checkpoint = args.checkpoint
    if checkpoint is None:
        texts = [
            part["text"]
            for state in states
            for message in build_messages(state, prompt, with_reference=True)[0]
            for part in message["content"]
        ]
        checkpoint = str(Path(work.name) / "model")
        save_checkpoint(*build_tiny_model(texts, {"vocab_size": 512}), checkpoint)

    hf = build_policy(
        {"kind": "hf", "batch_size": args.batch_size * max(1, args.k)}, checkpoint, prompt=prompt.model_dump()
    )
    server = None if args.base_url else LocalChatServer(checkpoint).__enter__()
    endpoint = {"base_url": args.base_url or server.base_url, "model": args.model or checkpoint}
    served = build_policy(
        {"kind": "openai", "endpoint": endpoint, "tokenizer": checkpoint, "batch_size": args.batch_size},
        prompt=prompt.model_dump(),
    )
    print(
        f"{len(states)} states, max_new_tokens={args.max_new_tokens}, {args.threads} threads, {endpoint['base_url']}"
        f"\nprompt (sft.training.prompt): {prompt.model_dump()}"
    )
    print(f"{'K':>3} {'hf states/s':>12} {'openai states/s':>16} {'hf/openai':>10} {'same greedy':>12}")
    try:
        for policy in (hf, served):  # warm-up: first-call costs (allocations, kernels) are not throughput
            score_states(states[:1], policy, ScoringConfig(max_new_tokens=2))
        for k in (0, args.k):
            config = ScoringConfig(
                k=k, max_new_tokens=args.max_new_tokens, batch_size=args.batch_size, seed=0
            )
            results = {}
            for name, policy in (("hf", hf), ("openai", served)):
                started = time.perf_counter()
                table = score_states(states, policy, config)
                results[name] = (len(states) / (time.perf_counter() - started), table)
            (hf_rate, hf_table), (openai_rate, openai_table) = results["hf"], results["openai"]
            same = hf_table["reply"].to_list() == openai_table["reply"].to_list()
            print(
                f"{k:>3} {hf_rate:>12.2f} {openai_rate:>16.2f} {hf_rate / openai_rate:>10.2f} {str(same):>12}"
            )
            print(f"    hf: {rates(hf_table)}\n    openai: {rates(openai_table)}")
    finally:
        if server is not None:
            server.__exit__(None, None, None)
        work.cleanup()


if __name__ == "__main__":
    main()
