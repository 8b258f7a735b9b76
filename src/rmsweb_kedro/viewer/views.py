"""What each page of the viewer shows, as plain data read from a :class:`~rmsweb_kedro.viewer.run.Run`: lazy scans,
filtered and sliced before anything is collected, so a page costs the rows it shows, not the run's size."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from rmsweb_kedro.viewer.run import Run, Screenshot

PAGE_SIZE = 50

#: The outcome of an episode: ``success``/``failure`` when judged; else its termination (``env_error``, ``blocked``,
#: ``judge_error``, ...), never counted as the agent's failure.
OUTCOME = (
    pl.when(pl.col("success"))
    .then(pl.lit("success"))
    .when(pl.col("success").not_())
    .then(pl.lit("failure"))
    .otherwise(pl.col("termination").fill_null("not judged"))
)

#: Pairwise filters of the task table: A's outcome and B's.
PAIR_FILTERS = {
    "a_only": ("success", "failure"),
    "b_only": ("failure", "success"),
    "both": ("success", "success"),
    "neither": ("failure", "failure"),
}


@dataclass
class StepView:
    """One step as pages draw it."""

    index: int
    url: str | None
    thought: str | None
    action: str | None
    raw_output: str | None
    error: str | None
    screenshot: Screenshot
    box: list[float] | None = None  # x, y, width, height in screenshot pixels
    typed: str | None = None  # the text a type action enters, written on the screenshot
    removed: bool = False  # a detour step the shortening removed
    diverged: bool = False  # the first step off the reference path


@dataclass
class EpisodeView:
    title: str
    link: str
    facts: dict[str, Any]
    steps: list[StepView] = field(default_factory=list)


def _typed(action: str | None) -> str | None:
    if not action:
        return None
    from rmsweb_kedro.contracts.actions import ActionParseError, parse_action

    try:
        parsed = parse_action(action)
    except ActionParseError:
        return None
    return parsed.text if parsed.type.value in ("type", "select_option") else None


def step_views(run: Run, rows: list[dict[str, Any]], root: str, prefix: str = "") -> list[StepView]:
    """Rows of a steps table (``steps``, ``online_steps``, ...) as :class:`StepView` (screenshots under ``root``)."""
    views = []
    for row in rows:
        shot = row.get("screenshot")
        views.append(
            StepView(
                index=row["index"],
                url=row.get("url"),
                thought=row.get("thought"),
                action=row.get("action"),
                raw_output=row.get("raw_output"),
                error=row.get("error"),
                screenshot=run.screenshot(root, f"{prefix}{shot}" if shot else None),
                box=row.get("target_box"),
                typed=_typed(row.get("action")),
            )
        )
    return views


def page_of(frame: pl.LazyFrame, page: int, size: int = PAGE_SIZE) -> tuple[pl.DataFrame, int]:
    """Rows of page ``page`` (0-based) and the number of rows in all."""
    total = frame.select(pl.len()).collect().item()
    return frame.slice(page * size, size).collect(), total


# ---------------------------------------------------------------- evaluation


def models(run: Run) -> list[str]:
    episodes = run.scan("online_episodes", ["model"])
    if episodes is None:
        return []
    return episodes.select(pl.col("model").unique(maintain_order=True)).collect()["model"].to_list()


def evaluation_tasks(
    run: Run,
    a: str | None = None,
    b: str | None = None,
    pair: str | None = None,
    site: str | None = None,
    split: str | None = None,
    mode: str | None = None,
    termination: str | None = None,
    page: int = 0,
) -> tuple[pl.DataFrame, int, list[str]]:
    """One row per (task, run): site, split and each model's outcome, steps and divergence mode, filtered by a
    pairwise outcome of models ``a`` and ``b`` (:data:`PAIR_FILTERS`), site, split, any model's divergence mode or
    termination; the page's rows, the count of all, and the models."""
    need = [
        "model",
        "run",
        "task_id",
        "site",
        "split",
        "success",
        "termination",
        "n_steps",
        "divergence_mode",
    ]
    episodes = run.scan("online_episodes", need)
    assert episodes is not None
    names = models(run)
    episodes = episodes.with_columns(OUTCOME.alias("outcome"))
    if site:
        episodes = episodes.filter(pl.col("site") == site)
    if split:
        episodes = episodes.filter(pl.col("split") == split)
    per_model = [
        agg
        for m in names
        for agg in (
            pl.col("outcome").filter(pl.col("model") == m).first().alias(f"{m}"),
            pl.col("n_steps").filter(pl.col("model") == m).first().alias(f"{m} steps"),
            pl.col("divergence_mode").filter(pl.col("model") == m).first().alias(f"{m} mode"),
        )
    ]
    table = episodes.group_by("task_id", "run").agg(
        pl.col("site").first(),
        pl.col("split").first(),
        *per_model,
        pl.col("divergence_mode").alias("_modes"),
        pl.col("termination").alias("_terminations"),
    )
    if pair in PAIR_FILTERS and a in names and b in names:
        want_a, want_b = PAIR_FILTERS[pair]
        table = table.filter((pl.col(a) == want_a) & (pl.col(b) == want_b))
    if mode:
        table = table.filter(pl.col("_modes").list.contains(mode))
    if termination:
        table = table.filter(pl.col("_terminations").list.contains(termination))
    table = table.drop("_modes", "_terminations").sort("task_id", "run")
    rows, total = page_of(table, page)
    return rows, total, names


def evaluation_choices(run: Run) -> dict[str, list[str]]:
    """The values the task table's filters offer: sites, splits, divergence modes, terminations."""
    episodes = run.scan("online_episodes", ["site", "split", "divergence_mode", "termination"])
    assert episodes is not None
    values = episodes.select(
        pl.col(c).drop_nulls().unique().sort().implode()
        for c in ("site", "split", "divergence_mode", "termination")
    ).collect()
    return {c: values[c][0].to_list() for c in values.columns}


def evaluation_task(run: Run, task_id: str, run_index: int) -> dict[str, Any]:
    """Each model's episode of one task and run, step by step, with the step where it first left the reference
    path (``diverged_at``) marked."""
    episodes = run.scan("online_episodes", ["model", "run", "task_id", "diverged_at"])
    assert episodes is not None
    rows = (
        episodes.filter((pl.col("task_id") == task_id) & (pl.col("run") == run_index))
        .with_columns(OUTCOME.alias("outcome"))
        .collect()
    )
    steps = run.scan("online_steps", ["model", "run", "task_id", "index", "screenshot"])
    by_model: dict[str, list[dict[str, Any]]] = {}
    if steps is not None:
        found = steps.filter((pl.col("task_id") == task_id) & (pl.col("run") == run_index)).sort(
            "model", "index"
        )
        for row in found.collect().iter_rows(named=True):
            by_model.setdefault(row["model"], []).append(row)
    columns = []
    for episode in rows.iter_rows(named=True):
        views = step_views(run, by_model.get(episode["model"], []), "evaluate")
        for view in views:
            view.diverged = view.index == episode["diverged_at"]
        columns.append({"episode": episode, "steps": views, "link": episode_link("evaluate", episode)})
    return {
        "task_id": task_id,
        "run": run_index,
        "columns": columns,
        "reference": reference_solution(run, task_id),
    }


def reference_solution(run: Run, task_id: str) -> list[str]:
    """The task's reference solution (sandbox tasks), one line a step; [] when there is none."""
    tasks = run.scan("tasks", ["id", "reference_solution"])
    if tasks is None:
        tasks = run.scan("sandbox_tasks", ["id", "reference_solution"])
    if tasks is None:
        return []
    found = tasks.filter(pl.col("id") == task_id).select("reference_solution").collect()
    if not found.height or not found.item():
        return []
    return [
        " ".join(f"{k}={v}" for k, v in step.items() if k not in ("longer",))
        for step in json.loads(found.item())
    ]


def episode_link(stage: str, episode: dict[str, Any]) -> str:
    from urllib.parse import urlencode

    if stage == "evaluate":
        query = {"stage": stage, "model": episode["model"], "run": episode["run"], "task": episode["task_id"]}
    else:
        query = {"stage": stage, "id": episode["trajectory_id"]}
    return f"/episode?{urlencode(query)}"


# ---------------------------------------------------------------- one episode, any stage


def episode(run: Run, stage: str, query: dict[str, str]) -> EpisodeView | None:
    """One episode of ``stage`` (``evaluate``: by model, run and task; ``mining``, ``live``, ``collection``: by
    trajectory id), None when this run has none such."""
    if stage == "evaluate":
        model, run_index, task = query.get("model", ""), int(query.get("run", 0)), query.get("task", "")
        episodes = run.scan("online_episodes", ["model", "run", "task_id"])
        if episodes is None:
            return None
        chosen = (pl.col("model") == model) & (pl.col("run") == run_index) & (pl.col("task_id") == task)
        facts = episodes.filter(chosen).with_columns(OUTCOME.alias("outcome")).collect()
        if not facts.height:
            return None
        fact = facts.row(0, named=True)
        steps = run.scan("online_steps", ["model", "run", "task_id", "index"])
        rows = [] if steps is None else steps.filter(chosen).sort("index").collect().to_dicts()
        views = step_views(run, rows, "evaluate")
        for view in views:
            view.diverged = view.index == fact.get("diverged_at")
        title = f"{model} on {task} (run {run_index})"
        return EpisodeView(title, episode_link("evaluate", fact), _facts(fact), views)
    trajectory_id = query.get("id", "")
    if stage == "collection":
        attempt = collection_attempt(run, trajectory_id)
        if attempt is None:
            return None
        return EpisodeView(f"attempt {trajectory_id}", attempt["link"], attempt["facts"], attempt["steps"])
    steps_table, root = {"mining": ("mining_online_steps", "mining"), "live": ("live_steps", "live")}.get(
        stage, (None, None)
    )
    if steps_table is None:
        return None
    steps = run.scan(steps_table, ["trajectory_id", "index"])
    if steps is None:
        return None
    rows = steps.filter(pl.col("trajectory_id") == trajectory_id).sort("index").collect().to_dicts()
    if not rows:
        return None
    facts: dict[str, Any] = {"trajectory": trajectory_id, "task": rows[0]["task_id"]}
    if stage == "live":
        results = run.scan("live_results", ["trajectory_id"])
        found = (
            results.filter(pl.col("trajectory_id") == trajectory_id).collect()
            if results is not None
            else None
        )
        if found is not None and found.height:
            facts = _facts(found.with_columns(OUTCOME.alias("outcome")).row(0, named=True))
    elif stage == "mining":
        report = run.json("mining_online_rollouts") or {}
        for rollout in report.get("episodes", []):
            if rollout.get("trajectory_id") == trajectory_id:
                facts |= rollout
    link = episode_link(stage, {"trajectory_id": trajectory_id})
    return EpisodeView(f"{stage} episode {trajectory_id}", link, facts, step_views(run, rows, root))


_FACTS = ("model", "task_id", "site", "split", "run", "outcome", "termination", "judge", "judge_reason", "n_steps",
          "diverged_at", "divergence_action", "divergence_reference", "divergence_mode", "critical_point",
          "benchmark", "wall_s")  # fmt: skip


def _facts(row: dict[str, Any]) -> dict[str, Any]:
    return {k: row[k] for k in _FACTS if k in row and row[k] is not None}


# ---------------------------------------------------------------- collection


def collection_tasks(run: Run, page: int = 0, solved: str | None = None) -> tuple[pl.DataFrame, int]:
    """One row per collected (task, mode): attempts, whether one succeeded, the steps of the first success."""
    log = run.scan("collection_log", ["mode", "task_id", "site", "attempt", "success", "n_steps"])
    assert log is not None
    table = (
        log.group_by("task_id", "mode")
        .agg(
            pl.col("site").first(),
            pl.len().alias("attempts"),
            pl.col("success").any().alias("solved"),
            pl.col("n_steps").filter(pl.col("success")).first().alias("steps of the success"),
        )
        .sort("task_id", "mode")
    )
    if solved in ("yes", "no"):
        table = table.filter(pl.col("solved") == (solved == "yes"))
    return page_of(table, page)


def collection_task(run: Run, task_id: str) -> list[dict[str, Any]]:
    """A task's attempts in order (mode, attempt), each with its steps, verdict and the reflection written after
    it; a successful one with its shortened trajectory beside it, the removed detour steps marked."""
    log = run.scan("collection_log", ["mode", "task_id", "attempt", "trajectory"])
    assert log is not None
    rows = log.filter(pl.col("task_id") == task_id).sort("mode", "attempt").collect()
    return [_attempt(run, row) for row in rows.iter_rows(named=True)]


def collection_attempt(run: Run, trajectory_id: str) -> dict[str, Any] | None:
    log = run.scan("collection_log", ["trajectory"])
    if log is None:
        return None
    rows = log.filter(pl.col("trajectory").str.json_path_match("$.id") == trajectory_id).collect()
    return _attempt(run, rows.row(0, named=True)) if rows.height else None


def _attempt(run: Run, row: dict[str, Any]) -> dict[str, Any]:
    from rmsweb_kedro.contracts.schema import Trajectory, step_row

    trajectory = Trajectory.model_validate_json(row["trajectory"])
    prefix = f"{trajectory.mode}/"  # collect keeps screenshots relative to <raw_root>/<mode>
    rows = [
        step_row(trajectory, s) | {"target_box": s.target_box and list(s.target_box)}
        for s in trajectory.steps
    ]
    steps = step_views(run, rows, "raw", prefix)
    verdict = trajectory.verdict
    facts = {
        "mode": trajectory.mode,
        "attempt": trajectory.attempt,
        "outcome": "success"
        if trajectory.success
        else ("failure" if trajectory.success is False else trajectory.termination),
        "termination": trajectory.termination,
        "judge": verdict.judge if verdict else None,
        "judge_reason": verdict.reason if verdict else None,
        "reflections_seen": len(trajectory.reflections),
    }
    shortened: list[StepView] = []
    if trajectory.success:
        shortened = _shortened(run, trajectory.id, prefix)
        kept = {(s.screenshot.url, s.action, s.url) for s in shortened}
        boxes = {(v.screenshot.url, v.action, v.url): v.box for v in steps}  # the steps table has no boxes
        for view in shortened:
            view.box = boxes.get((view.screenshot.url, view.action, view.url))
        for view in steps:
            view.removed = bool(shortened) and (view.screenshot.url, view.action, view.url) not in kept
    return {
        "id": trajectory.id,
        "facts": {k: v for k, v in facts.items() if v is not None},
        "reflection_after": trajectory.metadata.get("reflection_after"),
        "steps": steps,
        "shortened": shortened,
        "link": f"/episode?stage=collection&id={trajectory.id}",
    }


def _shortened(run: Run, trajectory_id: str, prefix: str) -> list[StepView]:
    steps = run.scan("shortened_steps", ["trajectory_id", "index"])
    if steps is None:
        return []
    rows = steps.filter(pl.col("trajectory_id") == trajectory_id).sort("index").collect().to_dicts()
    # shortened_steps name screenshots from the raw root (<mode>/<file>), as the steps table does
    return step_views(run, rows, "raw")


# ---------------------------------------------------------------- mining


MINING_LIST = (
    "state_id",
    "task_id",
    "site",
    "source",
    "competence",
    "step_success",
    "failure_mode",
    "in_sft",
)


def mining_states(run: Run, page: int = 0, failure_mode: str | None = None) -> tuple[pl.DataFrame, int, str]:
    """The critical states (or, before selection ran, the probed ones), a page of them; and the table read."""
    for name in ("critical_states", "mining_offline_probes"):
        states = run.scan(name, MINING_LIST)
        if states is not None:
            break
    else:
        raise LookupError("no mined states")
    # selection and origin (why a state is critical) where the run has them: older runs' tables lack origin
    extra = [c for c in ("selection", "origin") if c in states.collect_schema()]
    if failure_mode:
        states = states.filter(pl.col("failure_mode") == failure_mode)
    rows, total = page_of(states.select(*MINING_LIST, *extra).sort("state_id"), page)
    return rows, total, name


def mining_state(run: Run, state_id: str) -> dict[str, Any] | None:
    """One state: the reference action, the greedy action, each of the K samples with its polarized reward
    (``actions.polarized_reward`` against the state's reference set, with the run's ``salvage_ds.algorithm``
    r_pos, r_neg and r_invalid, else the defaults) and failure mode, the competence, and whether SFT trained on
    it."""
    from rmsweb_kedro.contracts.actions import ActionParseError, parse_action, polarized_reward
    from rmsweb_kedro.contracts.schema import reference_set
    from rmsweb_kedro.measures.mining import classify_failure

    need = ["state_id", "reference_action", "greedy_action", "sampled_actions", "competence", "in_sft"]
    for name in ("critical_states", "mining_offline_probes", "mining_online_probes"):
        states = run.scan(name, need)
        if states is None:
            continue
        found = states.filter(pl.col("state_id") == state_id).collect()
        if found.height:
            break
    else:
        return None
    state = found.row(0, named=True)

    def parsed(text: str | None) -> Any:
        try:
            return parse_action(text) if text and not text.startswith("<invalid") else None
        except ActionParseError:
            return None

    references = reference_set(state)
    previous = [a for a in (parsed(t) for t in state.get("previous_actions") or []) if a is not None]
    # the run's reward symbols where its parameters name them; polarized_reward's defaults are SalvageDSParams'
    algorithm = (run.params.get("salvage_ds") or {}).get("algorithm") or {}
    symbols = {k: algorithm[k] for k in ("r_pos", "r_neg", "r_invalid") if k in algorithm}
    samples = []
    for text in state["sampled_actions"] or []:
        action = parsed(text)
        mode = classify_failure(action, references, previous, state_url=state.get("url"))
        reward = polarized_reward(action, references, **symbols)
        samples.append({"action": text, "reward": reward, "failure_mode": mode.value if mode else None})
    shot = state.get("screenshot")
    # corpus states name it from the raw folder; online ones from the prompt's image root (the project)
    screenshot = run.screenshot("raw", shot)
    if screenshot.problem and shot:
        screenshot = run.screenshot_of_project_path(shot)
    return {"table": name, "state": state, "samples": samples, "screenshot": screenshot}


# ---------------------------------------------------------------- salvage-ds


#: The figures the Salvage-DS tab shows (catalog entries): each seed's run (the dev curve, groups a batch, the pool,
#: the loss terms), every trained state's share right over the updates, and the held-out states that flipped.
SALVAGE_FIGURES = {
    "salvage_ds_plot": "each seed's run: dev curve (a star: the returned weights), groups a batch, the pool, losses",
    "salvage_ds_states_plot": "each trained state's share of right samples over the updates",
    "flips_plot": "held-out states whose step success flipped between SFT and each seed",
}


def salvage(run: Run) -> dict[str, Any]:
    """Each training seed's run in one line (``measures.report.salvage_ds_table``, rounded), the figures of
    :data:`SALVAGE_FIGURES` that the run has, and every sampled group (``salvage_ds_groups``: its samples, rewards,
    the gate's decision and reason)."""
    from rmsweb_kedro.measures.report import salvage_ds_table

    report = run.json("salvage_ds_report")
    seeds = None
    if report is not None:
        table = salvage_ds_table(report)
        seeds = table.with_columns(
            (pl.col("dev_sft", "dev_returned") * 100).round(1),
            pl.col(pl.Float64).exclude("dev_sft", "dev_returned").round(2),
        )
    groups = run.scan("salvage_ds_groups")
    if groups is not None:
        mu = int(((run.params.get("salvage_ds") or {}).get("loop") or {}).get("updates_per_batch") or 1)
        groups = (
            groups.with_columns(
                (pl.col("batch") * mu).alias("first update"),
                pl.col("samples").list.join(" | "),
                pl.col("rewards").cast(pl.List(pl.String)).list.join(" "),
            )
            .sort("seed", "batch", "rank", "round", maintain_order=True)
            .head(2000)
            .collect()
        )
    figures = {name: caption for name, caption in SALVAGE_FIGURES.items() if run.has(name)}
    return {"seeds": seeds, "figures": figures, "groups": groups, "report": report}
