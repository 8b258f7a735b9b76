"""The context policy on the embedded default: what history off, previous actions only and full history cost and
give, on the same data and seeds.

Each setting changes only the context fields of the prompt (``globals.yml``'s ``policy_prompt``; full history also
writes its thought, ``include_thought``, since live its past thoughts are its own): the tiny model is built from
the same seed with a tokenizer trained on that setting's prompts (the ``sft`` stage's ``build_base_model``), trained
by the same SFT (``run_sft``: the default's loop, steps and seed, on the default run's augmented training states),
then scored by the evaluate stage's own offline scoring (the val states) and online episodes (every val and test
task of the training sites and the held-out site's 6, 2 browsers). ``--served`` evaluates each trained checkpoint
again through a vLLM server the evaluate functions start (``evaluate.policy.server``: vLLM's CPU build). Prints a
row a setting and path, and writes them to ``--out`` (CSV):

- ``offline``: val step success (and argument match);
- ``online``: successes of the judged episodes, with the 95 % Wilson interval over the distinct episodes;
- ``prompt_tokens``: the mean prompt of the val states in the checkpoint's tokens (``history_cut``: past steps
  the history budget cut there), and ``online_prompt_tokens``: the mean prompt of an online step;
- ``step_s``: online wall time per step (the browser's action and observation, the policy's decision), and
  ``sft_s``: SFT's wall time.

    kedro run --pipelines tasks,collect,trajectories,sft_data     # the default run's data (or a whole run)
    nice -n 10 .venv/bin/python benchmarks/context_policy.py [--settings off actions full] [--served]

Run it from the project root; times are wall-clock, so compare rows of one run on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("KEDRO_DISABLE_TELEMETRY", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

#: The context of each setting: what changes in the default prompt (the embedded default reads no screenshot, so
#: full history keeps every thought and action, the URL and the memorized facts).
SETTINGS = {
    "off": {"history_k": 0},
    "actions": {"history_k": 3},
    "full": {"history_k": "all", "history_thoughts": "all", "include_thought": True, "memory": True},
}


def prompt_tokens(processor, states: list[dict], prompt) -> tuple[float, int]:
    """The mean prompt length of ``states`` in the processor's tokens (generation prompt included) and the past
    steps the history budget cut."""
    from rmsweb_kedro.agents.hf_policy import prompt_inputs
    from rmsweb_kedro.contracts.prompts import build_messages

    lengths = [int(prompt_inputs([state], prompt, processor)["input_ids"].shape[1]) for state in states]
    cut = sum(build_messages(state, prompt, processor.tokenizer)[1]["history_cut"] for state in states)
    return sum(lengths) / len(lengths), cut


def vllm_server() -> dict:
    """``evaluate.policy.server`` for vLLM's CPU build (the settings of the served tests: float32, 1 GiB of KV
    cache, no chunked prefill), or exit saying how to make its venv."""
    found = subprocess.run(
        ["bash", str(ROOT / "scripts/vllm_env.sh"), "--path"], capture_output=True, text=True
    )
    if found.returncode != 0:
        sys.exit(f"--served needs vLLM's CPU build: {found.stderr.strip()} (bash scripts/vllm_env.sh)")
    return {
        "python": found.stdout.strip().splitlines()[-1], "dtype": "float32", "max_model_len": 2048,
        "env": {"VLLM_CPU_KVCACHE_SPACE": "1"}, "extra_args": ["--no-enable-chunked-prefill"],
        "startup_timeout_s": 600,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--settings", nargs="+", choices=list(SETTINGS), default=list(SETTINGS))
    parser.add_argument("--served", action="store_true", help="also evaluate each checkpoint served by vLLM")
    parser.add_argument("--thought-max-new-tokens", type=int, default=96, help="reply budget with a thought")
    parser.add_argument(
        "--max-steps", type=int, help="SFT steps (default: the default run's, sft.training.loop)"
    )
    parser.add_argument(
        "--max-tasks", type=int, help="online tasks of the training sites (default: evaluate's)"
    )
    parser.add_argument("--env", default=None, help="Kedro configuration environment (default: base + local)")
    parser.add_argument("--out", default="data/08_reporting/context_policy.csv")
    args = parser.parse_args()

    from kedro.framework.session import KedroSession
    from kedro.framework.startup import bootstrap_project

    from rmsweb_kedro.contracts.prompts import PromptConfig
    from rmsweb_kedro.measures import evaluation
    from rmsweb_kedro.models.modeling import LoadedModel, load_model, save_checkpoint
    from rmsweb_kedro.pipelines.sft.nodes import build_base_model
    from rmsweb_kedro.training.sft import SFTConfig, run_sft

    bootstrap_project(ROOT)
    with KedroSession.create(project_path=ROOT, env=args.env) as session:
        context = session.load_context()
        params, catalog = context.params, context.catalog
        base_train = catalog.load("sft_states_train")
        train = catalog.load("sft_states_train_augmented").to_dicts()
        val_states = catalog.load("sft_states_val")
        tasks = catalog.load("sandbox_tasks")
    val = val_states.to_dicts()
    work = Path(tempfile.mkdtemp(prefix="context_policy_"))
    print(f"{len(train)} training states, {len(val)} val states; checkpoints and episodes in {work}")
    print(f"{'setting':<8} {'path':<6} {'offline':>7} {'argument':>8} {'online':>7} {'wilson_95':>13} "
          f"{'prompt_tokens':>13} {'online_prompt':>13} {'history_cut':>11} {'step_s':>6} {'sft_s':>6}")  # fmt: skip
    rows = []
    for name in args.settings:
        prompt = PromptConfig.model_validate(params["sft"]["training"]["prompt"] | SETTINGS[name])
        sft = dict(params["sft"], training=params["sft"]["training"] | {"prompt": prompt.model_dump()})
        config = SFTConfig.model_validate(sft["training"])
        loop = config.loop.model_copy(
            update={"output_dir": str(work / name), "max_steps": args.max_steps or config.loop.max_steps}
        )
        model, processor = build_base_model(base_train, sft)
        started = time.monotonic()
        model = run_sft(model, processor, train, val, config.model_copy(update={"loop": loop})).model
        sft_s = time.monotonic() - started
        save_checkpoint(model, processor, work / name / "model")
        # loaded back from its directory, which a served evaluation serves
        trained = LoadedModel(*load_model({"path": str(work / name / "model"), "dtype": "float32"}))
        tokens, cut = prompt_tokens(trained.processor, val, prompt)
        paths = {"hf": {}}
        if args.served:
            paths["served"] = {"kind": "openai", "server": vllm_server(), "tokenizer": None}
        for path, policy in paths.items():
            evaluate = evaluation.EvaluateParams.model_validate(
                params["evaluate"]
                | {"server_logs": str(work / name / "servers"),
                   "policy": params["evaluate"]["policy"] | {"prompt": prompt.model_dump()} | policy
                   | ({"max_new_tokens": args.thought_max_new_tokens} if prompt.include_thought else {}),
                   "online": params["evaluate"]["online"] | {"episodes_root": str(work / name / path)}
                   | ({"max_tasks": args.max_tasks} if args.max_tasks is not None else {})}
            )  # fmt: skip
            predictions = evaluation.predict_offline(val_states, trained, evaluate, name)
            offline = evaluation.offline_metrics(predictions).row(0, named=True)
            episodes, _ = evaluation.run_online(tasks, trained, evaluate, name, params.get("rollouts"))
            online = evaluation.success_summary(episodes, evaluate.confidence)
            judged = episodes.filter(episodes["success"].is_not_null())
            steps = int(episodes["n_steps"].sum())
            row = {
                "setting": name, "path": path, "offline_step_success": offline["step_success_rate"],
                "argument_match": offline["argument_match"], "successes": int(judged["success"].sum()),
                "episodes": judged.height, "success_low": online["success_low"],
                "success_high": online["success_high"], "prompt_tokens": round(tokens, 1),
                "online_prompt_tokens": round(int(episodes["prompt_tokens"].sum()) / max(1, steps), 1),
                "history_cut": cut, "step_s": round(float(episodes["wall_s"].sum()) / max(1, steps), 3),
                "sft_s": round(sft_s),
            }  # fmt: skip
            rows.append(row)
            print(
                f"{name:<8} {path:<6} {row['offline_step_success']:>7.3f} {row['argument_match']:>8.3f} "
                f"{row['successes']:>3}/{row['episodes']:<3} {row['success_low']:>6.3f}-{row['success_high']:.3f} "
                f"{row['prompt_tokens']:>13.1f} {row['online_prompt_tokens']:>13.1f} {cut:>11} "
                f"{row['step_s']:>6.3f} {row['sft_s']:>6}",
                flush=True,
            )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
