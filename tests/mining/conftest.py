"""Mining fixtures: reference states collected in the real sandbox, and a tiny policy trained without one site.

``reference_states``: STATE rows of perfect scripted-teacher episodes on a few train tasks of three sites, played
in the real browser. ``weak_policy_dir``: a tiny Qwen3-VL checkpoint fine-tuned (short SFT) on the states of two of
those sites only, so it is weak at ``WEAK_SITE``.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from rmsweb_kedro.contracts.schema import STATE_SCHEMA, Task

SITES = ("shop", "flights", "recipes")
WEAK_SITE = "recipes"
TASKS_PER_SITE = 2
SFT_STEPS = 150  # enough for the tiny model to learn the few states of the two trained sites


@pytest.fixture(scope="session")
def mining_tasks(sandbox_task_list: list[Task]) -> list[Task]:
    chosen = []
    for site in SITES:
        chosen += sorted(
            (t for t in sandbox_task_list if t.site == site and t.split == "train"), key=lambda t: t.id
        )[:TASKS_PER_SITE]
    return chosen


@pytest.fixture(scope="session")
def reference_states(browser_config, sandbox_server, mining_tasks: list[Task]) -> pl.DataFrame:
    from rmsweb_kedro.agents.scripted import ScriptedTeacher, TeacherImperfections
    from rmsweb_kedro.episodes.episode import run_episode
    from rmsweb_kedro.judges.sandbox import SandboxJudge
    from rmsweb_kedro.measures.mining import state_row
    from rmsweb_kedro.web.browser import BrowserEnv
    from tests.fixtures_web import chromium_available

    if not chromium_available():
        pytest.skip("Chromium is not installed (set RMSWEB_CHROMIUM)")
    teacher = ScriptedTeacher(imperfections=TeacherImperfections(mistake_probs={}, self_correct_prob=0.0))
    judge = SandboxJudge(sandbox_server.session_state)
    rows = []
    # closed here: the session keeps no Playwright running in the main thread (tests/fixtures_web.py)
    with BrowserEnv(browser_config) as env:
        for task in mining_tasks:
            trajectory = run_episode(env, task, teacher, judge, max_steps=20)
            assert trajectory.success, f"{task.id}: the reference plan failed: {trajectory.verdict}"
            rows += [
                state_row(task, trajectory, i, s.action, s.thought) for i, s in enumerate(trajectory.steps)
            ]
    return pl.DataFrame(rows, schema=STATE_SCHEMA)


@pytest.fixture(scope="session")
def weak_policy_dir(reference_states: pl.DataFrame, tmp_path_factory) -> Path:
    """Short SFT of a fresh tiny model on every site but WEAK_SITE (the tokenizer sees all text)."""
    from rmsweb_kedro.contracts.prompts import PromptConfig, build_messages
    from rmsweb_kedro.models.modeling import build_tiny_model, save_checkpoint
    from rmsweb_kedro.training.loop import LoopConfig
    from rmsweb_kedro.training.sft import SFTConfig, run_sft

    prompt = PromptConfig()
    states = reference_states.to_dicts()
    texts = [
        part["text"]
        for state in states
        for message in build_messages(state, prompt, with_reference=True)[0]
        for part in message["content"]
    ]
    model, processor = build_tiny_model(texts)
    out = tmp_path_factory.mktemp("weak_policy")
    config = SFTConfig(
        loop=LoopConfig(
            output_dir=str(out / "run"), max_steps=SFT_STEPS, batch_size=8, learning_rate=3e-3, warmup_steps=5,
            eval_every=0, progress=False, log_every=50,
        ),
        prompt=prompt,
        loss_on="all",
        batching="packed",  # the padded batches' loss and gradients (tests/sft/test_packing.py), without the padding
    )  # fmt: skip
    result = run_sft(model, processor, [s for s in states if s["site"] != WEAK_SITE], [], config)
    save_checkpoint(result.model, processor, out / "model")
    return out / "model"
