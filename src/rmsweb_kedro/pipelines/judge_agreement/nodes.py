"""Nodes of the ``judge_agreement`` pipeline: an LLM judge's verdicts on sandbox episodes whose outcome the sandbox
checker knows, and how well they agree (statistics in :mod:`rmsweb_kedro.measures.agreement`)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import polars as pl
from pydantic import BaseModel, ConfigDict, Field

from rmsweb_kedro.contracts.schema import Trajectory, tasks_from_frame
from rmsweb_kedro.judges.choice import JudgeSpecConfig
from rmsweb_kedro.measures.agreement import agreement_table, failure_mode, stratified_sample
from rmsweb_kedro.models.endpoint import Credentials

logger = logging.getLogger(__name__)


class JudgeAgreementParams(BaseModel):
    """``params:judge_agreement`` (conf/base/parameters_judge_agreement.yml)."""

    model_config = ConfigDict(extra="forbid")

    raw_root: str = "data/01_raw/trajectories"  # where collect kept each episode's pages (globals.yml)
    #: The LLM judge measured: kind webjudge or webvoyager with an OpenAI-compatible endpoint.
    judge: JudgeSpecConfig = Field(default_factory=lambda: JudgeSpecConfig(kind="webjudge"))
    policy_column: str = "mode"  # the collection_log column telling the policies apart
    strata: list[str] = Field(default_factory=lambda: ["policy", "failure_mode"])
    per_stratum: int = Field(default=10, ge=1)
    groups: list[str] = Field(default_factory=lambda: ["site", "failure_mode", "policy"])
    seed: int = 0
    confidence: float = Field(default=0.95, gt=0, lt=1)
    bootstrap: int = Field(default=1000, ge=100, description="resamples for kappa's interval")


SAMPLE_SCHEMA = pl.Schema(
    {"episode_id": pl.String, "policy": pl.String, "task_id": pl.String, "site": pl.String, "attempt": pl.Int32,
     "truth": pl.Boolean, "failure_mode": pl.String, "termination": pl.String, "partition": pl.String,
     "trajectory": pl.String}
)  # fmt: skip
VERDICT_SCHEMA = pl.Schema(
    {name: dtype for name, dtype in SAMPLE_SCHEMA.items() if name != "trajectory"}
    | {"pages": pl.Int32, "judged": pl.Boolean, "judge_error": pl.String, "judge_reason": pl.String,
       "judge": pl.String, "judged_by": pl.String, "prompt_tokens": pl.Int64, "completion_tokens": pl.Int64,
       "cost_usd": pl.Float64}
)  # fmt: skip


def sample_episodes(collection_log: pl.DataFrame, params: dict[str, Any]) -> pl.DataFrame:
    """A stratified sample (``strata``, at most ``per_stratum`` each, drawn with ``seed``) of the judged sandbox
    episodes of the collection log; environment errors, which no judge saw, are left out."""
    p = JudgeAgreementParams.model_validate(params)
    if p.policy_column not in collection_log.columns:
        raise ValueError(f"judge_agreement.policy_column: collection_log has no column {p.policy_column!r}")
    judged = collection_log.filter(pl.col("success").is_not_null())
    rows = []
    for row in judged.iter_rows(named=True):
        trajectory = Trajectory.model_validate_json(row["trajectory"])
        rows.append(
            {"episode_id": trajectory.id, "policy": str(row[p.policy_column]), "task_id": row["task_id"],
             "site": row["site"], "attempt": row["attempt"], "truth": bool(row["success"]),
             "failure_mode": failure_mode(trajectory), "termination": row["termination"],
             "partition": row["partition"], "trajectory": row["trajectory"]}
        )  # fmt: skip
    frame = pl.DataFrame(rows, schema=SAMPLE_SCHEMA)
    sample = stratified_sample(frame, p.strata, p.per_stratum, p.seed)
    if sample.is_empty():
        raise ValueError("judge_agreement: the collection log holds no judged episode to sample")
    counts = sample.group_by("truth").len().sort("truth").rows()
    logger.info("judge_agreement: %d episodes sampled (by outcome: %s)", sample.height, counts)
    return sample


def judge_episodes(
    sample: pl.DataFrame,
    sandbox_tasks: pl.DataFrame,
    params: dict[str, Any],
    credentials: Credentials | None = None,
) -> pl.DataFrame:
    """The configured LLM judge on every sampled episode, shown what it would be shown live: the task text, the
    episode's steps and its pages (the screenshots collect kept under ``<raw_root>/<partition>``, in order). A reply
    the judge cannot use is its failure verdict, as the benchmarks score it, and is flagged in ``judge_error``.
    ``credentials``: Kedro's (``endpoint_credentials``), for the judge endpoint."""
    from tqdm.auto import tqdm

    from rmsweb_kedro.episodes.episode import final_answer
    from rmsweb_kedro.judges.choice import build_judge

    p = JudgeAgreementParams.model_validate(params)
    if p.judge.kind not in ("webjudge", "webvoyager"):
        raise ValueError(
            f"judge_agreement.judge.kind: an LLM judge (webjudge, webvoyager), not {p.judge.kind!r}"
        )
    judge = build_judge(p.judge, credentials=credentials)
    tasks = {t.id: t for t in tasks_from_frame(sandbox_tasks)}
    rows = []
    for row in tqdm(sample.iter_rows(named=True), total=sample.height, desc="judge", unit="episode"):
        if row["task_id"] not in tasks:
            raise ValueError(
                f"judge_agreement: task {row['task_id']!r} of {row['episode_id']} is not in sandbox_tasks"
            )
        trajectory = Trajectory.model_validate_json(row["trajectory"])
        pages = sorted((Path(p.raw_root) / row["partition"]).glob("*.png"))
        context = {"screenshots": [str(page) for page in pages]}
        verdict, usage = judge.judge(
            tasks[row["task_id"]], trajectory.steps, final_answer(trajectory.steps), context
        )
        spec = verdict.judged_by
        rows.append(
            {key: value for key, value in row.items() if key != "trajectory"}
            | {"pages": len(pages), "judged": verdict.success, "judge_error": verdict.details.get("error"),
               "judge_reason": verdict.reason, "judge": verdict.judge,
               "judged_by": spec.model_dump_json() if spec else None, "prompt_tokens": usage.prompt_tokens,
               "completion_tokens": usage.completion_tokens, "cost_usd": judge.cost_of(usage)}
        )  # fmt: skip
    return pl.DataFrame(rows, schema=VERDICT_SCHEMA)


def summarize_agreement(
    verdicts: pl.DataFrame, params: dict[str, Any]
) -> tuple[pl.DataFrame, dict[str, Any]]:
    """``(table, summary)``: agreement overall and per site, failure mode and policy (counts, accuracy, precision
    and recall on success, Cohen's kappa, each with its interval); the summary names the judge and its spec,
    whether the official protocol was followed, and the overall figures."""
    p = JudgeAgreementParams.model_validate(params)
    table = agreement_table(verdicts, p.groups, p.confidence, p.bootstrap, p.seed)
    specs = sorted(set(verdicts["judged_by"].drop_nulls()))
    judged_by = [json.loads(spec) for spec in specs]
    overall = table.filter(pl.col("group") == "all").row(0, named=True)
    summary = {
        "judges": sorted(set(verdicts["judge"].drop_nulls())),
        "judged_by": judged_by,
        # "Official protocol" only when every verdict used the benchmark's own prompts.
        "official_protocol": bool(judged_by)
        and all(spec["prompt_source"] == "official" for spec in judged_by),
        "confidence": p.confidence,
        "overall": {key: value for key, value in overall.items() if key not in ("group", "value")},
        "cost_usd": float(verdicts["cost_usd"].sum()),
    }
    logger.info(
        "judge_agreement: %d episodes, accuracy %s, kappa %s, %d judge errors",
        overall["episodes"], overall["accuracy"], overall["kappa"], overall["judge_errors"],
    )  # fmt: skip
    return table, summary


def plot_agreement(table: pl.DataFrame, summary: dict[str, Any]) -> Any:
    """Accuracy with its interval per site, failure mode and policy (left), and the overall confusion matrix
    (right); the title names the judge and whether its prompts were the benchmark's own."""
    from rmsweb_kedro.measures.reporting import figure_panels

    figure, (left, right) = figure_panels(2, (5.5, 0.35 * table.height + 2.5))
    rows = list(reversed(table.filter(pl.col("accuracy").is_not_null()).rows(named=True)))
    labels = [f"{r['group']}: {r['value']} (n={r['episodes']})" for r in rows]
    values = [r["accuracy"] for r in rows]
    errors = [
        [r["accuracy"] - r["accuracy_low"] for r in rows],
        [r["accuracy_high"] - r["accuracy"] for r in rows],
    ]
    left.barh(range(len(rows)), values, xerr=errors, color="tab:blue", alpha=0.7, capsize=3)
    left.set_yticks(range(len(rows)), labels, fontsize=8)
    left.set_xlim(0, 1)
    left.set_xlabel(f"agreement with the sandbox checker ({summary['confidence']:.0%} interval)")
    overall = summary["overall"]
    matrix = [[overall["tp"], overall["fn"]], [overall["fp"], overall["tn"]]]
    right.imshow(matrix, cmap="Blues")
    for i in range(2):
        for j in range(2):
            right.text(j, i, str(matrix[i][j]), ha="center", va="center")
    right.set_xticks([0, 1], ["judge: success", "judge: failure"])
    right.set_yticks([0, 1], ["checker: success", "checker: failure"])
    kappa = overall["kappa"]
    right.set_title(f"kappa {kappa:.2f}" if kappa is not None else "kappa undefined (one class)")
    source = (
        "official protocol" if summary["official_protocol"] else "project wording, not the official protocol"
    )
    figure.suptitle(f"{', '.join(summary['judges'])} ({source})", fontsize=10)
    figure.tight_layout()
    return figure
