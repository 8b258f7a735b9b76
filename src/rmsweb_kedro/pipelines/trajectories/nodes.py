"""Nodes of the ``trajectories`` pipeline: validate raw trajectory files, build tables, shorten successes.

Every non-blank line of every raw file ends up either as a row of ``trajectories`` (with its steps in ``steps``)
or as a row of ``quarantine`` with the file, line, field and a reason; a file that is empty or cannot be read
is one quarantine row (line 0). :func:`report_ingest` checks that the counts add up and raises when they do not.
"""

from __future__ import annotations

import codecs
import logging
import os
import posixpath
import re
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import polars as pl
from pydantic import ValidationError

from rmsweb_kedro.reporting import figure_panels
from rmsweb_kedro.schema import (
    QUARANTINE_SCHEMA,
    STEP_SCHEMA,
    TRAJECTORY_SCHEMA,
    Trajectory,
    step_row,
    trajectory_row,
)

logger = logging.getLogger(__name__)

_ID_FIELD = re.compile(rb'"id"\s*:\s*"([^"\\]{1,200})"')


class IngestAccountingError(RuntimeError):
    """The tables do not account for every record read: something was dropped or counted twice."""


def _cut(text: str, bound: int) -> str:
    return text if len(text) <= bound else f"{text[:bound]}... [{len(text) - bound} more characters cut]"


def _record_id(line: bytes) -> str | None:
    match = _ID_FIELD.search(line[:4096])
    return match.group(1).decode("utf-8", "replace") if match else None


def _validation_reason(err: ValidationError) -> tuple[str, str]:
    """(field, reason) of a pydantic error: the first field at fault and every problem in words."""
    problems = err.errors(include_url=False)
    fields = [".".join(str(p) for p in e["loc"]) for e in problems]
    reasons = []
    for e, field in zip(problems, fields, strict=True):
        message = e["msg"].removeprefix("Value error, ")
        if e["type"] == "json_invalid":
            reasons.append(f"malformed JSON: {message}")
        elif e["type"] == "missing":
            reasons.append(f"required field {field!r} is missing")
        else:
            reasons.append(
                f"{field or 'record'}: {message}" + (f" (got {e['input']!r:.80})" if field else "")
            )
    return fields[0], "; ".join(reasons)


class _Ingest:
    """The state of one pass over the raw files: accepted rows, quarantine rows, and the counts."""

    def __init__(self, raw_root: str, max_axtree_chars: int, max_raw_chars: int, check_screenshots: bool):
        self.raw_root = os.path.realpath(raw_root)
        self.max_axtree_chars = max_axtree_chars
        self.max_raw_chars = max_raw_chars
        self.check_screenshots = check_screenshots
        self.trajectory_rows: list[dict[str, Any]] = []
        self.step_rows: list[dict[str, Any]] = []
        self.quarantine_rows: list[dict[str, Any]] = []
        self.first_seen: dict[str, str] = {}
        self.screenshot_ok: dict[str, str | None] = {}  # raw-root-relative path -> None (fine) or the reason
        self.counts = {"files": 0, "lines": 0, "blank_lines": 0, "file_faults": 0, "steps": 0}
        self.unreadable_files: list[dict[str, str]] = []

    def quarantine(
        self, source: str, line: int, record_id: str | None, field: str, reason: str, raw: str
    ) -> None:
        self.quarantine_rows.append(
            {
                "source_file": source,
                "line": line,
                "record_id": record_id,
                "field": field,
                "reason": reason,
                "raw": _cut(raw, self.max_raw_chars),
            }
        )

    def read_file(self, source: str, load: Callable[[], bytes | str]) -> None:
        self.counts["files"] += 1
        try:
            data = load()
        except Exception as err:  # noqa: BLE001 -- any failure to read is reported, and the run goes on
            reason = f"file cannot be read: {type(err).__name__}: {err}"
            self.unreadable_files.append({"file": source, "reason": reason})
            self.counts["file_faults"] += 1
            self.quarantine(source, 0, None, "", reason, "")
            logger.warning("%s: %s", source, reason)
            return
        if isinstance(data, str):
            data = data.encode("utf-8")
        data = data.removeprefix(codecs.BOM_UTF8)  # editors on Windows write one; it is not part of line 1
        lines = data.split(b"\n")
        folder = posixpath.dirname(source)
        non_blank = 0
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                self.counts["blank_lines"] += number < len(lines) or bool(line)  # not the final newline's ''
                continue
            non_blank += 1
            self.counts["lines"] += 1
            self.read_line(source, folder, number, line)
        if non_blank == 0:
            self.counts["file_faults"] += 1
            self.quarantine(source, 0, None, "", "file is empty: it holds no trajectory line", "")

    def read_line(self, source: str, folder: str, number: int, line: bytes) -> None:
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as err:
            reason = f"line is not valid UTF-8: byte 0x{line[err.start]:02x} at column {err.start + 1}"
            self.quarantine(source, number, _record_id(line), "", reason, line.decode("utf-8", "replace"))
            return
        try:
            trajectory = Trajectory.model_validate_json(text)
        except ValidationError as err:
            field, reason = _validation_reason(err)
            self.quarantine(source, number, _record_id(line), field, reason, text)
            return
        fault = self.check(trajectory, folder, len(text))
        if fault:
            self.quarantine(source, number, trajectory.id, *fault, text)
            return
        where = f"{source} line {number}"
        self.first_seen[trajectory.id] = where
        self.trajectory_rows.append(trajectory_row(trajectory, source))
        prefix = f"{folder}/" if folder else ""
        self.step_rows.extend(step_row(trajectory, step, prefix) for step in trajectory.steps)
        self.counts["steps"] += len(trajectory.steps)

    def check(self, trajectory: Trajectory, folder: str, line_chars: int) -> tuple[str, str] | None:
        """What the record validators cannot see: duplicates across files, tree size, screenshots on disk."""
        if trajectory.id in self.first_seen:
            return "id", (
                f"trajectory id {trajectory.id!r} was already accepted from {self.first_seen[trajectory.id]}; "
                "ids must be unique across all raw files"
            )
        if line_chars > self.max_axtree_chars:  # only a long line can hold a long tree
            for step in trajectory.steps:
                if step.axtree is not None and len(step.axtree) > self.max_axtree_chars:
                    return f"steps.{step.index}.axtree", (
                        f"accessibility tree of {len(step.axtree):,} characters is over the bound of "
                        f"{self.max_axtree_chars:,} (trajectories.max_axtree_chars); a tree that size is a "
                        "broken page dump, not an observation"
                    )
        if self.check_screenshots:
            for step in trajectory.steps:
                if step.screenshot is None:
                    continue
                reason = self.screenshot_fault(posixpath.join(folder, step.screenshot))
                if reason:
                    return f"steps.{step.index}.screenshot", reason
        return None

    def screenshot_fault(self, relative: str) -> str | None:
        if relative not in self.screenshot_ok:
            path = os.path.realpath(os.path.join(self.raw_root, relative))
            if os.path.commonpath([path, self.raw_root]) != self.raw_root:  # a symlink pointing outside
                self.screenshot_ok[relative] = f"screenshot {relative!r} resolves outside the raw data folder"
            elif not os.path.isfile(path):
                self.screenshot_ok[relative] = (
                    f"screenshot file {relative!r} does not exist under {self.raw_root}"
                )
            else:
                self.screenshot_ok[relative] = None
        return self.screenshot_ok[relative]


def _partitions(raw: dict[str, Callable[[], Any]], suffix: str) -> Iterator[tuple[str, Callable[[], Any]]]:
    for partition_id in sorted(raw):  # sorted: "the first file wins" for duplicate ids is then reproducible
        yield f"{partition_id}{suffix}", raw[partition_id]


def validate_trajectories(
    raw_trajectories: dict[str, Callable[[], bytes | str]], params: dict[str, Any]
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, dict[str, Any]]:
    """Validate every line of every raw file into ``trajectories``/``steps`` rows or a ``quarantine`` row.

    Returns the three tables and the counts :func:`report_ingest` checks the tables against.
    """
    ingest = _Ingest(
        raw_root=params["raw_root"],
        max_axtree_chars=params["max_axtree_chars"],
        max_raw_chars=params["max_quarantine_raw_chars"],
        check_screenshots=params["check_screenshots"],
    )
    for source, load in _partitions(raw_trajectories, params["suffix"]):
        ingest.read_file(source, load)
    trajectories = pl.DataFrame(ingest.trajectory_rows, schema=TRAJECTORY_SCHEMA)
    steps = pl.DataFrame(ingest.step_rows, schema=STEP_SCHEMA)
    quarantine = pl.DataFrame(ingest.quarantine_rows, schema=QUARANTINE_SCHEMA)
    counts = {**ingest.counts, "unreadable_files": ingest.unreadable_files}
    if quarantine.height:
        logger.warning("%d raw records quarantined; see the quarantine table", quarantine.height)
    return trajectories, steps, quarantine, counts


def report_ingest(
    trajectories: pl.DataFrame, steps: pl.DataFrame, quarantine: pl.DataFrame, counts: dict[str, Any]
) -> dict[str, Any]:
    """The row-accounting report; raises IngestAccountingError unless records in = accepted + quarantined."""
    records_in = counts["lines"] + counts["file_faults"]
    accepted, quarantined = trajectories.height, quarantine.height
    if records_in != accepted + quarantined or steps.height != counts["steps"]:
        raise IngestAccountingError(
            f"{records_in} records read ({counts['lines']} lines, {counts['file_faults']} file faults) but "
            f"{accepted} accepted + {quarantined} quarantined; {counts['steps']} steps read, {steps.height} in table"
        )
    by_reason = (
        quarantine.group_by("field").len().sort("len", descending=True).iter_rows() if quarantined else []
    )
    return {
        "files": counts["files"],
        "unreadable_files": counts["unreadable_files"],
        "records_in": records_in,
        "lines": counts["lines"],
        "blank_lines": counts["blank_lines"],
        "file_faults": counts["file_faults"],
        "accepted": accepted,
        "quarantined": quarantined,
        "quarantined_by_field": {field or "(record)": n for field, n in by_reason},
        "steps": steps.height,
        "balanced": True,
    }


def _state_key() -> pl.Expr:
    # A page state is its URL and accessibility tree; without a tree the state is unknown and never repeats.
    known = pl.struct("url", "axtree").hash(seed=0)
    return pl.when(pl.col("axtree").is_null()).then(None).otherwise(known)


def _loop_erased_rows(candidates: pl.DataFrame) -> np.ndarray:
    """Row numbers (into ``candidates``) kept by loop erasure, all trajectories at once.

    From a step's state, jump to the *last* step acting on the same state and keep that one; a revisited state
    means everything in between was a detour, and an action after which the state is unchanged is a loop of one.
    The final step's state has no later repeat, so the trajectory still ends where it ended.
    """
    n = candidates.height
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    row = pl.col("row")
    positions = candidates.with_row_index("row").select(
        last=pl.when(pl.col("state").is_null()).then(row).otherwise(row.max().over("trajectory_id", "state")),
        start=row.min().over("trajectory_id"),
        end=row.max().over("trajectory_id") + 1,
    )
    last = positions["last"].to_numpy().astype(np.int64)
    starts = np.unique(positions["start"].to_numpy().astype(np.int64))
    ends = positions["end"].to_numpy().astype(np.int64)[starts]
    keep = np.zeros(n, dtype=bool)
    cursor = starts
    while cursor.size:  # one round per kept step of the longest trajectory, every trajectory in parallel
        jump = last[cursor]
        keep[jump] = True
        cursor = jump + 1
        alive = cursor < ends
        cursor, ends = cursor[alive], ends[alive]
    return np.flatnonzero(keep)


def shorten_trajectories(
    trajectories: pl.DataFrame, steps: pl.DataFrame
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Remove detours from successful trajectories without changing where they end.

    Removed: steps whose action did nothing (it raised an error or did not parse; never the final step), then
    loops (see :func:`_loop_erased_rows`). Failed or unjudged trajectories pass unchanged. Kept steps are
    re-indexed 0, 1, 2, ...; ``n_steps`` is updated.
    """
    successful = trajectories.filter(pl.col("success").fill_null(False))["trajectory_id"]
    ordered = steps.sort("trajectory_id", "index", maintain_order=True).with_columns(
        is_success=pl.col("trajectory_id").is_in(successful.implode()),
        is_final=pl.col("index") == pl.col("index").max().over("trajectory_id"),
    )
    did_nothing = (pl.col("error").is_not_null() | pl.col("action").is_null()) & ~pl.col("is_final")
    candidates = ordered.filter(pl.col("is_success") & ~did_nothing).with_columns(state=_state_key())
    kept = candidates[_loop_erased_rows(candidates)]
    shortened_steps = (
        pl.concat([ordered.filter(~pl.col("is_success")), kept.drop("state")])
        .sort("trajectory_id", "index", maintain_order=True)
        .with_columns(index=pl.int_range(pl.len(), dtype=pl.Int32).over("trajectory_id"))
        .select(STEP_SCHEMA.names())
    )
    lengths = shortened_steps.group_by("trajectory_id").agg(new_steps=pl.len().cast(pl.Int32))
    shortened_trajectories = (
        trajectories.join(lengths, on="trajectory_id", how="left", maintain_order="left")
        .with_columns(n_steps=pl.col("new_steps").fill_null(0))
        .select(TRAJECTORY_SCHEMA.names())
    )
    return shortened_trajectories, shortened_steps


def report_shortening(trajectories: pl.DataFrame, shortened_trajectories: pl.DataFrame) -> pl.DataFrame:
    """Steps before and after shortening per site (successful trajectories only), and the share removed."""
    both = trajectories.filter(pl.col("success").fill_null(False)).join(
        shortened_trajectories.select("trajectory_id", steps_after="n_steps"), on="trajectory_id"
    )
    per_site = both.group_by("site").agg(
        trajectories=pl.len().cast(pl.Int64),
        steps_before=pl.col("n_steps").cast(pl.Int64).sum(),
        steps_after=pl.col("steps_after").cast(pl.Int64).sum(),
    )
    total = per_site.select(
        site=pl.lit("(all)"),
        trajectories=pl.col("trajectories").sum(),
        steps_before=pl.col("steps_before").sum(),
        steps_after=pl.col("steps_after").sum(),
    )
    return (
        pl.concat([per_site.sort("site"), total])
        .with_columns(steps_removed=pl.col("steps_before") - pl.col("steps_after"))
        .with_columns(
            share_removed=pl.when(pl.col("steps_before") > 0)
            .then(pl.col("steps_removed") / pl.col("steps_before"))
            .otherwise(0.0)
        )
    )


def plot_shortening(shortening_report: pl.DataFrame) -> Any:
    """A bar chart of steps before/after shortening per site, with the share removed on top."""
    per_site = shortening_report.filter(pl.col("site") != "(all)")
    figure, (axes,) = figure_panels(panel_size=(max(4, 1.2 * per_site.height + 2), 3.5))
    x = np.arange(per_site.height)
    axes.bar(x - 0.2, per_site["steps_before"], width=0.4, label="before")
    axes.bar(x + 0.2, per_site["steps_after"], width=0.4, label="after")
    for position, (after, share) in enumerate(
        zip(per_site["steps_after"], per_site["share_removed"], strict=True)
    ):
        axes.annotate(f"-{share:.0%}", (position + 0.2, after), ha="center", va="bottom", fontsize=8)
    axes.set_xticks(x, per_site["site"].to_list(), rotation=20)
    axes.set_ylabel("steps (successful trajectories)")
    axes.set_title("Shortening: steps before and after removing detours")
    axes.legend()
    figure.tight_layout()
    return figure
