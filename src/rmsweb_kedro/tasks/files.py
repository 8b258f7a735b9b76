"""Task files a researcher brings (JSONL, JSON array, Parquet or CSV) as :class:`~rmsweb_kedro.contracts.schema.Task` records.

A :class:`ColumnMapping` says which column holds each field (dotted paths reach into nested objects, as in
OpenWebRL's ``metadata.start_url``; a list of columns: the first one a row fills); :data:`SHAPES` are ready mappings
for the published task files:

- ``webgym``: microsoft/webgym's task JSONL as its two readers take it: ``areal/dataset/webgym.py``
  (``get_webgym_rl_dataset``: ``task_name`` or ``task``, ``website``, ``domain``, ``subdomain``, ``difficulty``,
  ``evaluator_reference``, ``reference_answer``, ``task_id``) and ``webgym/environment/async_webgym.py``
  (``_prepare_tasks``: the answer in ``definite_answer``; ``evaluator_reference`` a text, a list of texts, a list of
  ``{description, difficulty}`` or fact groups ``{id, description, facts}``; ``difficulty`` an integer, 1-3 easy,
  4-6 medium, 7+ hard). Judged as its ``webgym/models/evaluator.py`` judges (every fact must hold);
- ``openwebrl``: OpenWebRL's parquet as ``openwebrl/data/convert_benchmark_jsonl_to_parquet.py`` writes it:
  ``prompt`` (the chat messages, ``[{role: user, content: <task>}]``) + ``metadata: {task_id, start_url, task}``
  (``task_id`` like ``webvoyager/84``); the text is ``metadata.task``;
- ``pae``: PAE's JSONL, ``{web_name, id, ques, web}`` (WebVoyager's shape, as amazon-science/PAE's
  ``scripts/propose_tasks_from_names_webvoyager.py`` writes it, ``web`` looked up from ``web_name``); ``web_name`` is
  kept as a label;
- ``project``: this project's own Task rows (what the proposer writes).

A task's site is its start page's registrable domain (:func:`rmsweb_kedro.contracts.sites.site_of`), whatever label the file
gives it. A row records what it carries in its judge config (``reference_answer``, ``rubric`` and, for WebGym's facts,
``rubric_rule: every_fact``), never a judge: ``judges.choice.judge_kind`` chooses. Rows that cannot become a task are quarantined with the file, line (CSV: the file's line, header
included; Parquet: the row number from 1), record id, field (the file's column) and reason: rows in = accepted +
quarantined (:class:`~rmsweb_kedro.tasks.benchmarks.loaders.LoadResult`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import polars as pl
from pydantic import BaseModel, ConfigDict, field_validator

from rmsweb_kedro.contracts.schema import JudgeSpec, Task
from rmsweb_kedro.contracts.sites import site_of
from rmsweb_kedro.tasks.benchmarks.loaders import (
    BenchmarkFileError,
    HttpUrlText,
    LoadResult,
    NonEmpty,
    json_array_records,
    jsonl_records,
    load_rows,
    read_text,
)
from rmsweb_kedro.tasks.rubrics import normalise_rubric, rubric_config

#: "amazon.com", "www.example.co.uk/path": a host name with a dot, no scheme, no spaces.
_BARE_HOST = re.compile(r"[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+(/\S*)?")
Format = Literal["auto", "jsonl", "json", "parquet", "csv"]
Record = tuple[int, str, Any, str | None]


class ColumnMapping(BaseModel):
    """Which column of the file holds each task field (dotted paths reach into nested objects; a list: the first
    column a row fills). ``id`` null: the file's stem and a hash of the task's text and start URL (``<stem>-<hash>``:
    an edited task is a new task, so a collection journal never reuses another task's attempts under its id).
    ``site_label``: a name the file gives the site (PAE's ``web_name``), kept in ``metadata``; the task's site is
    always its start page's registrable domain."""

    model_config = ConfigDict(extra="forbid")

    instruction: str | list[str]
    start_url: str | list[str]
    id: str | list[str] | None = None
    site_label: str | list[str] | None = None
    reference_answer: str | list[str] | None = None
    rubric: str | list[str] | None = None
    difficulty: str | list[str] | None = None
    split: str | list[str] | None = None


SHAPES: dict[str, ColumnMapping] = {
    # microsoft/webgym: areal/dataset/webgym.py reads task_name (else task) and reference_answer;
    # webgym/environment/async_webgym.py reads definite_answer: a file may hold either
    "webgym": ColumnMapping(
        id="task_id", instruction=["task_name", "task"], start_url="website",
        reference_answer=["reference_answer", "definite_answer"], rubric="evaluator_reference",
        difficulty="difficulty",
    ),
    "openwebrl": ColumnMapping(id="metadata.task_id", instruction="metadata.task", start_url="metadata.start_url"),
    "pae": ColumnMapping(id="id", instruction="ques", start_url="web", site_label="web_name"),
}  # fmt: skip
#: The shapes whose rubric is a list of facts that must all hold (WebGym's evaluator), not points to a threshold.
EVERY_FACT_SHAPES = ("webgym",)


class TaskFile(BaseModel):
    """One task file of ``params:tasks.files``: its path, format (``auto``: by suffix), and either a published
    ``shape`` or the ``columns`` of your own file."""

    model_config = ConfigDict(extra="forbid")

    path: str
    format: Format = "auto"
    shape: Literal["webgym", "openwebrl", "pae", "project", "custom"] = "custom"
    columns: ColumnMapping | None = None

    def mapping(self) -> ColumnMapping | None:
        """The column mapping (None for ``project`` rows, read as they are)."""
        if self.shape == "project":
            return None
        if self.shape == "custom":
            if self.columns is None:
                raise ValueError(
                    f"task file {self.path}: shape 'custom' needs 'columns' (at least instruction and start_url); "
                    f"or name a published shape: {sorted(SHAPES)} or 'project'"
                )
            return self.columns
        return SHAPES[self.shape]


class FileTaskRow(BaseModel):
    """A row after its columns are mapped: what a task needs, validated."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    id: NonEmpty
    instruction: NonEmpty
    start_url: HttpUrlText
    site_label: str | None = None
    reference_answer: str | None = None
    rubric: list[dict[str, Any]] | None = None
    difficulty: Literal["easy", "medium", "hard"] | None = None
    split: Literal["train", "val", "test"] | None = None

    @field_validator("start_url", mode="before")
    @classmethod
    def _bare_host_is_https(cls, value: Any) -> Any:
        # WebGym's `website` is often a bare host ("amazon.com"): it means that site's https front page
        if isinstance(value, str) and _BARE_HOST.fullmatch(value.strip()):
            return "https://" + value.strip()
        return value

    @field_validator("reference_answer", mode="before")
    @classmethod
    def _answer_text(cls, value: Any) -> Any:
        if value is None or (isinstance(value, str) and not value.strip()):
            return None
        return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)

    @field_validator("rubric", mode="before")
    @classmethod
    def _rubric_items(cls, value: Any) -> Any:
        """Every published rubric shape as rubric items (:func:`~rmsweb_kedro.tasks.rubrics.normalise_rubric`)."""
        return normalise_rubric(value)

    @field_validator("difficulty", mode="before")
    @classmethod
    def _level(cls, value: Any) -> Any:
        """Texts easy/medium/hard (any case); numbers on WebGym's scale (``async_webgym.py``
        ``_get_max_steps_for_difficulty``): 1-3 easy, 4-6 medium, 7+ hard."""
        if value is None or value == "":
            return None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return "easy" if value <= 3 else "medium" if value <= 6 else "hard"
        text = str(value).strip().lower()
        if text.isdigit():
            return cls._level(int(text))
        return text


def _get(record: dict[str, Any], path: str | list[str]) -> Any:
    if isinstance(path, list):  # the first column the row fills
        found = (_get(record, one) for one in path)
        return next((v for v in found if v is not None and v != ""), None)
    value: Any = record
    for part in path.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    if isinstance(value, str) and value[:1] in "{[" and "." in path:
        # a nested column stored as JSON text (CSV, some parquet writers)
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            pass
    return value


def _expanded(record: Any) -> Any:
    """A record whose columns hold JSON texts of objects (a CSV's ``metadata``) with those parsed."""
    if not isinstance(record, dict):
        return record
    out = dict(record)
    for key, value in record.items():
        if isinstance(value, str) and value.startswith("{"):
            try:
                out[key] = json.loads(value)
            except json.JSONDecodeError:
                pass
    return out


def _mapped(records: Iterator[Record], mapping: ColumnMapping, stem: str) -> Iterator[Record]:
    """Each record with its columns renamed to :class:`FileTaskRow`'s fields."""
    for line, raw, record, error in records:
        if error is not None or not isinstance(record, dict):
            yield line, raw, record, error
            continue
        record = _expanded(record)
        row = {
            name: _get(record, column)
            for name, column in mapping.model_dump().items()
            if column is not None and _get(record, column) is not None
        }
        if mapping.id is None:
            text = f"{row.get('instruction')}\n{row.get('start_url')}"
            row["id"] = f"{stem}-{hashlib.sha256(text.encode()).hexdigest()[:10]}"
        elif row.get("id") is not None:
            row["id"] = str(row["id"])
        yield line, raw, row, None


def _table_records(frame: pl.DataFrame, first_line: int) -> Iterator[Record]:
    for number, row in enumerate(frame.iter_rows(named=True), start=first_line):
        yield number, json.dumps(row, ensure_ascii=False, default=str), row, None


def records(path: Path, file_format: Format) -> Iterator[Record]:
    """(line, raw text, parsed record or None, parse error or None) for each row of a task file."""
    if not path.is_file():
        raise BenchmarkFileError(f"{path}: no such task file (params:tasks.files)")
    kind = file_format if file_format != "auto" else path.suffix.lstrip(".").lower()
    if kind == "jsonl":
        return jsonl_records(read_text(path))
    if kind == "json":
        return json_array_records(read_text(path), path)
    if kind == "parquet":
        return _table_records(pl.read_parquet(path), 1)
    if kind == "csv":
        # every column as text: a CSV has no types, and an id like "007" must stay itself
        return _table_records(pl.read_csv(path, infer_schema=False), 2)
    raise BenchmarkFileError(
        f"{path}: unknown task file format {kind!r}; give format: jsonl, json, parquet or csv in params:tasks.files"
    )


def _task(row: FileTaskRow, path: Path, every_fact: bool) -> Task:
    carried: dict[str, Any] = {}
    if row.reference_answer is not None:
        carried["reference_answer"] = row.reference_answer
    if row.rubric is not None:
        carried.update(rubric_config(row.rubric, every_fact))
    metadata: dict[str, Any] = {"file": path.name}
    if row.site_label:
        metadata["site_label"] = row.site_label
    return Task(
        id=row.id,
        source="file",
        site=site_of(row.start_url),
        start_url=row.start_url,
        instruction=row.instruction,
        level=row.difficulty,
        split=row.split,
        judge=JudgeSpec(kind="none", config=carried),
        metadata=metadata,
    )


class _ProjectRow(BaseModel):
    """A ``project`` row is a Task as the proposer writes it (``load_rows`` validates a model, then converts)."""

    model_config = ConfigDict(extra="ignore")

    task: Task

    @classmethod
    def model_validate(cls, obj: Any, *args: Any, **kwargs: Any) -> _ProjectRow:  # type: ignore[override]
        return cls(task=Task.model_validate(obj))


def load_task_file(spec: TaskFile | dict[str, Any]) -> LoadResult:
    """The accepted tasks of one task file and its quarantined rows (duplicate ids included)."""
    spec = TaskFile.model_validate(spec)
    path = Path(spec.path)
    mapping = spec.mapping()
    rows = records(path, spec.format)
    if mapping is None:
        return load_rows(path, rows, _ProjectRow, lambda row: row.task, "id")
    every_fact = spec.shape in EVERY_FACT_SHAPES
    result = load_rows(
        path, _mapped(rows, mapping, path.stem), FileTaskRow, lambda row: _task(row, path, every_fact), "id"
    )
    columns = {
        name: column if isinstance(column, str) else " | ".join(column)
        for name, column in mapping.model_dump().items()
        if column is not None
    }
    for entry in result.quarantine:  # name the file's column, which is what the user can fix
        entry["field"] = ", ".join(
            columns.get(name.strip(), name.strip()) for name in entry["field"].split(",")
        )
    return result


__all__ = ["SHAPES", "ColumnMapping", "FileTaskRow", "TaskFile", "load_task_file", "records"]
