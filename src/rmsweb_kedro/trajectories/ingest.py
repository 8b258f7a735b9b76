"""Ingest of raw trajectory files (docs/data_contracts.md): validate every line into the ``trajectories`` and
``steps`` tables or a ``quarantine`` row, and account for every record read.

Every non-blank line of every raw file ends up either as a row of ``trajectories`` (with its steps in ``steps``)
or as a row of ``quarantine`` with the file, line, field and a reason; a file that is empty or cannot be read
is one quarantine row (line 0). :func:`account` checks that the counts add up and raises when they do not.
"""

from __future__ import annotations

import codecs
import logging
import os
import posixpath
import re
from collections.abc import Callable, Iterator
from typing import Any

import polars as pl
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rmsweb_kedro.contracts.schema import (
    QUARANTINE_SCHEMA,
    STEP_SCHEMA,
    TRAJECTORY_SCHEMA,
    Trajectory,
    step_row,
    trajectory_fault,
    trajectory_row,
)

logger = logging.getLogger(__name__)

_ID_FIELD = re.compile(rb'"id"\s*:\s*"([^"\\]{1,200})"')


class IngestParams(BaseModel):
    """``params:trajectories`` (conf/base/parameters_trajectories.yml): where the raw files are, validation bounds."""

    model_config = ConfigDict(extra="forbid")

    raw_root: str = "data/01_raw/trajectories"  # the raw files' folder; screenshots must stay inside it
    suffix: str = ".jsonl"
    max_axtree_chars: int = Field(default=1_000_000, ge=1, description="a longer tree quarantines its record")
    max_quarantine_raw_chars: int = Field(
        default=2000, ge=0, description="quarantine rows cut the text to this"
    )
    check_screenshots: bool = True


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
        """What the field validators cannot see: invariants across fields (``schema.trajectory_fault``),
        duplicates across files, tree size, screenshots on disk."""
        if fault := trajectory_fault(trajectory):
            return fault
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


def validate(
    raw: dict[str, Callable[[], bytes | str]], params: IngestParams
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, dict[str, Any]]:
    """Validate every line of every raw file (``raw``: partition id -> loader, as PartitionedDataset gives them)
    into ``trajectories``/``steps`` rows or a ``quarantine`` row.

    Returns the three tables and the counts :func:`account` checks the tables against.
    """
    ingest = _Ingest(
        raw_root=params.raw_root,
        max_axtree_chars=params.max_axtree_chars,
        max_raw_chars=params.max_quarantine_raw_chars,
        check_screenshots=params.check_screenshots,
    )
    for source, load in _partitions(raw, params.suffix):
        ingest.read_file(source, load)
    trajectories = pl.DataFrame(ingest.trajectory_rows, schema=TRAJECTORY_SCHEMA)
    steps = pl.DataFrame(ingest.step_rows, schema=STEP_SCHEMA)
    quarantine = pl.DataFrame(ingest.quarantine_rows, schema=QUARANTINE_SCHEMA)
    counts = {**ingest.counts, "unreadable_files": ingest.unreadable_files}
    return trajectories, steps, quarantine, counts


def account(
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
