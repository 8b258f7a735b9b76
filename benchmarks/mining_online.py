"""Mining's cost per online rollout against its cost per offline probed state, in one run on one policy (#59: the
experiment rolls the SFT policy out on hundreds of tasks; what does one rollout cost next to one probed state?).

    .venv/bin/python benchmarks/mining_online.py [--tasks 8]          # a tiny model fine-tuned briefly on the references
    .venv/bin/python benchmarks/mining_online.py --checkpoint data/06_models/sft_model/<version>/sft_model

The references are the reference solutions of ``--tasks`` sandbox train tasks (``solve.ReferenceAgent``, judged by the
sandbox checker, world 0) as STATE rows. Offline, ``probing.probe_corpus`` probes every one of those states (the
greedy reply and ``k`` samples each); online, ``probing.probe_online`` rolls the policy out once on each task (no
journal) and probes the divergence states of the failed rollouts. Both use the default run's mining parameters
(conf/base, resolved as ``kedro run`` resolves them), every state probed. The online figure per rollout includes
starting the sandbox and the browsers, the rollout's steps (one greedy call each) and the probes of its
divergences. Timings on a shared machine are noisy: compare the two figures of one run.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def reference_states(tasks):
    """STATE rows of the tasks' reference solutions played in the sandbox (unsolved tasks left out)."""
    from rmsweb_kedro.agents.reference import ReferenceAgent
    from rmsweb_kedro.contracts.schema import STATE_SCHEMA
    from rmsweb_kedro.episodes.rollouts import EpisodeSpec, Roles, run_rollouts
    from rmsweb_kedro.judges.sandbox import SandboxJudge
    from rmsweb_kedro.measures.mining import state_row

    specs = [EpisodeSpec(key=t.id, task=t, max_steps=20) for t in tasks]
    roles = Roles(
        agent=lambda _seed: ReferenceAgent(), judge=lambda server: SandboxJudge(server.session_state)
    )
    rows = []
    for task, (run,) in zip(tasks, run_rollouts(specs, roles, sandbox_seed=0, progress=None), strict=True):
        if run.success:
            rows += [state_row(task, run, i, step.action, step.thought) for i, step in enumerate(run.steps)]
    return pl.DataFrame(rows, schema=STATE_SCHEMA)


def tiny_policy(states: pl.DataFrame, prompt, steps: int, folder: str):
    """A tiny model fine-tuned ``steps`` steps on ``states`` (so it writes actions, as an SFT policy does)."""
    from rmsweb_kedro.contracts.prompts import build_messages
    from rmsweb_kedro.models.modeling import build_tiny_model
    from rmsweb_kedro.training.loop import LoopConfig
    from rmsweb_kedro.training.sft import SFTConfig, run_sft

    rows = states.to_dicts()
    texts = [
        part["text"]
        for state in rows
        for message in build_messages(state, prompt, with_reference=True)[0]
        for part in message["content"]
    ]
    model, processor = build_tiny_model(texts)
    loop = LoopConfig(output_dir=f"{folder}/sft", max_steps=steps, batch_size=8, learning_rate=3e-3,
                      warmup_steps=5, eval_every=0, progress=False, log_every=steps)  # fmt: skip
    result = run_sft(model, processor, rows, [], SFTConfig(loop=loop, prompt=prompt, loss_on="all"))
    return result.model, processor


def main() -> None:
    import torch
    from kedro.config import OmegaConfigLoader

    from rmsweb_kedro.contracts.prompts import PromptConfig
    from rmsweb_kedro.measures.mining import corpus_states, deduplicate_states
    from rmsweb_kedro.measures.probing import MiningParams, probe_corpus, probe_online
    from rmsweb_kedro.models.modeling import load_model
    from rmsweb_kedro.settings import CONFIG_LOADER_ARGS
    from rmsweb_kedro.web.sandbox import SandboxParams, generate_tasks

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", help="a checkpoint directory (default: a tiny model fine-tuned here)")
    parser.add_argument(
        "--tasks", type=int, default=8, help="train tasks: their references and one rollout each"
    )
    parser.add_argument("--sft-steps", type=int, default=150)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    tasks = [t for t in generate_tasks(SandboxParams()) if t.split == "train"]
    # spread over the sites and templates
    tasks = [tasks[i * len(tasks) // args.tasks] for i in range(args.tasks)]
    references = reference_states(tasks)
    conf = Path(__file__).resolve().parents[1] / "conf"
    loader = OmegaConfigLoader(str(conf), **{**CONFIG_LOADER_ARGS, "default_run_env": "base"})
    base = loader["parameters"]["mining"]
    with tempfile.TemporaryDirectory() as folder:
        overrides = {
            "rollouts": "all",
            "journal_path": None,
            "sandbox_seed": 0,
            "screenshot_root": f"{folder}/shots",
        }
        params = {**base, "max_states_probed": None, "online": {**base["online"], **overrides}}
        config = MiningParams.model_validate(params)
        prompt = PromptConfig.model_validate(config.policy.prompt)
        if args.checkpoint:
            policy = load_model({"path": args.checkpoint})
        else:
            policy = tiny_policy(references, prompt, args.sft_steps, folder)
        corpus = deduplicate_states(corpus_states(references, references.clear()))
        started = time.perf_counter()
        probe_corpus(corpus, policy, config)
        offline_s = time.perf_counter() - started
        started = time.perf_counter()
        online, counts, steps = probe_online(
            tasks, corpus_states(references, references.clear()), policy, config
        )
        online_s = time.perf_counter() - started
    rollouts = counts["rollouts"]
    print(f"{len(tasks)} tasks, {references.height} reference states ({corpus.height} distinct), K={config.scoring.k}, "
          f"max_new_tokens={config.scoring.max_new_tokens}, {args.threads} threads, load {os.getloadavg()[0]:.1f}")  # fmt: skip
    print(
        f"offline: {corpus.height} states probed in {offline_s:.1f} s: {offline_s / corpus.height:.2f} s a state"
    )
    print(f"online:  {rollouts} rollouts ({counts.get('success', 0)} solved, {steps.height} steps, "
          f"{online.height} divergence states probed) in {online_s:.1f} s: {online_s / rollouts:.2f} s a rollout")  # fmt: skip
    print(f"one rollout costs {online_s / rollouts / (offline_s / corpus.height):.1f} probed states")


if __name__ == "__main__":
    main()
