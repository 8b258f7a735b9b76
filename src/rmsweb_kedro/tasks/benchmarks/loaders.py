"""Loaders for the public benchmark task files: WebVoyager (with its reference answers, the GAIA web subset and
Fara's cleaned file), Online-Mind2Web and WebTailBench, into :class:`~rmsweb_kedro.contracts.schema.Task` records.

A task's ``site`` is the registrable domain of its start page (:func:`rmsweb_kedro.contracts.sites.site_of`), as everywhere
in the project; the benchmark's own label stays in ``metadata`` (WebVoyager's ``web_name``, WebTailBench's
``category``).

Every loader reads one file and returns a :class:`LoadResult`: the accepted tasks, and the rows it could not accept,
quarantined with the file, line, record id, field and reason (rows in = accepted + quarantined). A file that
cannot be read at all (missing, not JSON where a whole document is needed) raises :class:`BenchmarkFileError`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlparse

import polars as pl
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from rmsweb_kedro.contracts.schema import QUARANTINE_SCHEMA, JudgeSpec, Task, level_for_length
from rmsweb_kedro.contracts.sites import site_of
from rmsweb_kedro.tasks.rubrics import RubricItem, rubric_config

#: Quarantined raw text is cut to this many characters.
RAW_LIMIT = 500
#: WebTailBench rows carry no start URL ("web" is empty): the agent starts from a search engine.
DEFAULT_WEBTAILBENCH_START_URL = "https://www.bing.com/"


class BenchmarkFileError(ValueError):
    """A benchmark file that cannot be read at all; the message names the file (and the line when known)."""


def http_url(value: str) -> str:
    parsed = urlparse(value)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ValueError(f"not an http(s) URL: {value!r}")
    return value


HttpUrlText = Annotated[str, AfterValidator(http_url)]
NonEmpty = Annotated[str, Field(min_length=1)]


class _Row(BaseModel):
    # Upstream files may grow new columns; they are not errors. Whitespace around text (a trailing "\r") is.
    model_config = ConfigDict(extra="ignore", str_strip_whitespace=True, populate_by_name=True)


class WebVoyagerRow(_Row):
    web_name: NonEmpty
    id: NonEmpty
    ques: NonEmpty
    web: HttpUrlText

    @field_validator("id")
    @classmethod
    def _id_names_site(cls, value: str, info: ValidationInfo) -> str:
        web_name = info.data.get("web_name")  # absent when web_name itself failed
        site, sep, number = value.rpartition("--")
        if web_name and (not sep or site != web_name or not number.isdigit()):
            raise ValueError(f"id {value!r} is not '<web_name>--<n>' with web_name {web_name!r}")
        return value


class ReferenceAnswer(_Row):
    id: int = Field(ge=0)
    type: Literal["possible", "golden"]
    ans: NonEmpty


class ReferenceSite(_Row):
    notice: str = ""
    answers: list[dict[str, Any]]


class GaiaWebRow(_Row):
    task_id: NonEmpty
    level: int = Field(alias="Level", ge=1, le=3)
    final_answer: NonEmpty = Field(alias="Final answer")
    id: NonEmpty
    ques: NonEmpty
    web: HttpUrlText


class OnlineMind2WebRow(_Row):
    task_id: NonEmpty
    confirmed_task: NonEmpty
    website: HttpUrlText
    reference_length: int = Field(ge=1)
    level: Literal["easy", "medium", "hard"]

    @field_validator("level")
    @classmethod
    def _level_matches_length(cls, value: str, info: ValidationInfo) -> str:
        length = info.data.get("reference_length")
        if length is not None and value != level_for_length(length):
            raise ValueError(
                f"level {value!r} does not match reference_length {length} ({level_for_length(length)})"
            )
        return value


class Rubric(_Row):
    items: list[RubricItem] = Field(min_length=1)


class WebTailBenchRow(_Row):
    id: NonEmpty
    category: NonEmpty
    ques: NonEmpty
    web: str = ""
    precomputed_rubric: Rubric

    @field_validator("web")
    @classmethod
    def _web_empty_or_url(cls, value: str) -> str:
        return http_url(value) if value else value


# ---------------------------------------------------------------- results


@dataclass
class LoadResult:
    """What one file gave: accepted tasks and quarantined rows (dicts with :data:`QUARANTINE_SCHEMA`)."""

    source_file: str
    tasks: list[Task] = field(default_factory=list)
    quarantine: list[dict[str, Any]] = field(default_factory=list)
    rows_in: int = 0

    def counts(self) -> dict[str, int]:
        # Task files accept tasks; the reference-answer file accepts answers: both are rows in less rows out.
        return {
            "rows_in": self.rows_in,
            "accepted": self.rows_in - len(self.quarantine),
            "quarantined": len(self.quarantine),
        }

    def quarantine_frame(self) -> pl.DataFrame:
        return pl.DataFrame(self.quarantine, schema=QUARANTINE_SCHEMA)

    def raise_if_quarantined(self) -> LoadResult:
        """Strict mode: raise with the first quarantined row's file, line, record, field and reason."""
        if self.quarantine:
            first = self.quarantine[0]
            raise BenchmarkFileError(
                f"{first['source_file']}: {len(self.quarantine)} bad row(s); first at line {first['line']}, "
                f"record {first['record_id']!r}, field {first['field']!r}: {first['reason']}"
            )
        return self

    def _reject(
        self, line: int | None, record_id: str | None, field_name: str, reason: str, raw: str
    ) -> None:
        self.quarantine.append(
            {
                "source_file": self.source_file,
                "line": line,
                "record_id": record_id,
                "field": field_name,
                "reason": reason,
                "raw": raw[:RAW_LIMIT],
            }
        )


def describe(error: ValidationError) -> tuple[str, str]:
    """(fields, reason) of a validation error: 'ques', 'field required'."""
    problems = error.errors()
    fields = ", ".join(".".join(str(p) for p in e["loc"]) or "<row>" for e in problems)
    reason = "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'row'}: {e['msg'].removeprefix('Value error, ')}"
        for e in problems
    )
    return fields, reason


# ---------------------------------------------------------------- readers (line, raw text, parsed object or error)


def read_text(path: Path) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BenchmarkFileError(f"{path}: no such benchmark file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise BenchmarkFileError(f"{path}: cannot be read as UTF-8 text: {err}") from None


def jsonl_records(text: str) -> Iterator[tuple[int, str, Any, str | None]]:
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield number, line, json.loads(line), None
        except json.JSONDecodeError as err:
            yield number, line, None, f"not valid JSON: {err.msg} (column {err.colno})"


def json_array_records(text: str, path: Path) -> Iterator[tuple[int, str, Any, str | None]]:
    """The elements of a top-level JSON array with the line each starts on (json.load forgets lines)."""
    decoder = json.JSONDecoder()

    def skip(position: int) -> int:
        while position < len(text) and text[position] in " \t\r\n":
            position += 1
        return position

    def fail(position: int, what: str) -> BenchmarkFileError:
        return BenchmarkFileError(f"{path}: line {text.count(chr(10), 0, position) + 1}: {what}")

    position = skip(0)
    if not text.startswith("[", position):
        raise fail(position, "expected a JSON array of task objects")
    position = skip(position + 1)
    if text.startswith("]", position):
        return
    while True:
        start = position
        try:
            record, position = decoder.raw_decode(text, position)
        except json.JSONDecodeError as err:
            raise BenchmarkFileError(f"{path}: line {err.lineno}: not valid JSON: {err.msg}") from None
        yield text.count("\n", 0, start) + 1, text[start:position], record, None
        position = skip(position)
        if text.startswith(",", position):
            position = skip(position + 1)
        elif text.startswith("]", position):
            return
        else:
            raise fail(position, "expected ',' or ']' after an array element")


# ---------------------------------------------------------------- the generic loop


def load_rows(
    path: Path,
    records: Iterator[tuple[int, str, Any, str | None]],
    row_model: type[_Row],
    to_task: Any,
    id_field: str,
) -> LoadResult:
    """Validate each record with ``row_model``, convert with ``to_task``, quarantine what fails (and duplicates)."""
    result = LoadResult(source_file=str(path))
    first_line_of: dict[str, int] = {}
    for line, raw, record, parse_error in records:
        result.rows_in += 1
        record_id = str(record.get(id_field)) if isinstance(record, dict) and record.get(id_field) else None
        if parse_error:
            result._reject(line, None, "<json>", parse_error, raw)
            continue
        if not isinstance(record, dict):
            result._reject(line, None, "<row>", f"expected a JSON object, got {type(record).__name__}", raw)
            continue
        try:
            row = row_model.model_validate(record)
        except ValidationError as err:
            result._reject(line, record_id, *describe(err), raw)
            continue
        if record_id in first_line_of:
            result._reject(
                line, record_id, id_field, f"duplicate id; first seen on line {first_line_of[record_id]}", raw
            )
            continue
        first_line_of[record_id] = line
        try:
            result.tasks.append(to_task(row))
        except (ValidationError, ValueError) as err:
            fields, reason = describe(err) if isinstance(err, ValidationError) else ("<task>", str(err))
            result._reject(line, record_id, fields, reason, raw)
    return result


# ---------------------------------------------------------------- WebVoyager


@dataclass(frozen=True)
class ReferenceAnswers:
    """WebVoyager's reference answers, keyed by task id ('Allrecipes--3'), with the file's own bad records."""

    answers: dict[str, dict[str, str]]
    result: LoadResult


def load_webvoyager_reference_answers(path: Path | str) -> ReferenceAnswers:
    """``{"<site>": {"notice", "answers": [{"id", "type", "ans"}]}}`` -> answers by task id; bad answers quarantined."""
    path = Path(path)
    text = read_text(path)
    try:
        document = json.loads(text)
    except json.JSONDecodeError as err:
        raise BenchmarkFileError(f"{path}: line {err.lineno}: not valid JSON: {err.msg}") from None
    if not isinstance(document, dict):
        raise BenchmarkFileError(f"{path}: expected a JSON object keyed by site name")
    result = LoadResult(source_file=str(path))
    answers: dict[str, dict[str, str]] = {}
    for site, block in document.items():
        try:
            site_block = ReferenceSite.model_validate(block)
        except ValidationError as err:
            fields, reason = describe(err)
            result.rows_in += 1
            result._reject(None, site, fields, reason, json.dumps(block)[:RAW_LIMIT])
            continue
        for position, raw in enumerate(site_block.answers):
            result.rows_in += 1
            record_id = f"{site}--{raw.get('id')}" if isinstance(raw, dict) else f"{site}[{position}]"
            try:
                answer = ReferenceAnswer.model_validate(raw)
            except ValidationError as err:
                fields, reason = describe(err)
                result._reject(
                    None, record_id, f"{site}.answers[{position}].{fields}", reason, json.dumps(raw)
                )
                continue
            answers[f"{site}--{answer.id}"] = {
                "reference_answer": answer.ans,
                "reference_answer_type": answer.type,
                "reference_notice": site_block.notice.strip(),
            }
    return ReferenceAnswers(answers=answers, result=result)


def load_webvoyager(
    path: Path | str,
    reference_answers: ReferenceAnswers | None = None,
    original_questions: dict[str, str] | None = None,
    benchmark: str = "WebVoyager",
) -> LoadResult:
    """WebVoyager's task file (or Fara's cleaned copy): one ``{"web_name", "id", "ques", "web"}`` a line.

    ``reference_answers`` go into the judge config; ``original_questions`` (id -> original ``ques``) marks the
    tasks a cleaned copy reworded, whose reference answers may be stale.
    """
    path = Path(path)
    answers = reference_answers.answers if reference_answers else {}

    def to_task(row: WebVoyagerRow) -> Task:
        config = dict(answers.get(row.id, {}))
        metadata: dict[str, Any] = {"benchmark": benchmark, "file": path.name, "web_name": row.web_name}
        if original_questions is not None:
            original = original_questions.get(row.id)
            metadata["reworded"] = original is not None and original.strip() != row.ques
            if config and metadata["reworded"]:
                config["reference_answer_stale"] = True
        return Task(
            id=row.id,
            source="webvoyager",
            site=site_of(row.web),
            start_url=row.web,
            instruction=row.ques,
            judge=JudgeSpec(kind="webvoyager", config=config),
            metadata=metadata,
        )

    return load_rows(path, jsonl_records(read_text(path)), WebVoyagerRow, to_task, "id")


def load_gaia_web(path: Path | str) -> LoadResult:
    """WebVoyager's GAIA web subset: ``{"task_id", "Level", "Final answer", "id", "ques", "web"}`` a line.

    Judged against the exact final answer; GAIA's level (1-3) is not a step-count band, so it stays in metadata.
    """
    path = Path(path)

    def to_task(row: GaiaWebRow) -> Task:
        return Task(
            id=row.id,
            source="webvoyager",
            site=site_of(row.web),
            start_url=row.web,
            instruction=row.ques,
            judge=JudgeSpec(kind="reference_answer", config={"reference_answer": row.final_answer}),
            metadata={
                "benchmark": "GAIA web (WebVoyager)",
                "file": path.name,
                "gaia_task_id": row.task_id,
                "gaia_level": row.level,
            },
        )

    return load_rows(path, jsonl_records(read_text(path)), GaiaWebRow, to_task, "id")


# ---------------------------------------------------------------- Online-Mind2Web


def load_online_mind2web(path: Path | str) -> LoadResult:
    """Online-Mind2Web: a JSON array of ``{"task_id", "confirmed_task", "website", "reference_length", "level"}``."""
    path = Path(path)

    def to_task(row: OnlineMind2WebRow) -> Task:
        return Task(
            id=row.task_id,
            source="online_mind2web",
            site=site_of(row.website),
            start_url=row.website,
            instruction=row.confirmed_task,
            level=row.level,
            reference_length=row.reference_length,
            judge=JudgeSpec(kind="webjudge"),
            metadata={"benchmark": "Online-Mind2Web", "file": path.name},
        )

    return load_rows(path, json_array_records(read_text(path), path), OnlineMind2WebRow, to_task, "task_id")


# ---------------------------------------------------------------- WebTailBench


def load_webtailbench(path: Path | str, start_url: str = DEFAULT_WEBTAILBENCH_START_URL) -> LoadResult:
    """WebTailBench with rubrics: ``{"id", "category", "ques", "web", "precomputed_rubric": {"items": [...]}}``.

    The rubric (criterion, description, max_points, condition) goes into the judge config for the rubric verifier;
    rows without a start URL start from ``start_url``.
    """
    path = Path(path)
    http_url(start_url)

    def to_task(row: WebTailBenchRow) -> Task:
        items = [item.model_dump(exclude_none=True) for item in row.precomputed_rubric.items]
        return Task(
            id=row.id,
            source="webtailbench",
            site=site_of(row.web or start_url),
            start_url=row.web or start_url,
            instruction=row.ques,
            judge=JudgeSpec(
                kind="rubric",
                config=rubric_config(items),
            ),
            metadata={
                "benchmark": "WebTailBench",
                "file": path.name,
                "category": row.category,
                "start_url_given": bool(row.web),
            },
        )

    return load_rows(path, jsonl_records(read_text(path)), WebTailBenchRow, to_task, "id")


# ---------------------------------------------------------------- a whole folder of the standard file names

#: The standard file names (as in shared/benchmarks and as the download command writes them).
WEBVOYAGER = "WebVoyager_data.jsonl"
WEBVOYAGER_REFERENCE = "WebVoyager_reference_answer.json"
GAIA_WEB = "WebVoyager_GAIA_web.jsonl"
FARA_WEBVOYAGER = "Fara_WebVoyager_data_08312025.jsonl"
ONLINE_MIND2WEB = "Online_Mind2Web_06042025.json"
WEBTAILBENCH = "WebTailBench_v1_rubrics.stagehand.jsonl"


def load_folder(root: Path | str, start_url: str = DEFAULT_WEBTAILBENCH_START_URL) -> dict[str, LoadResult]:
    """Every benchmark file present under ``root``, keyed by benchmark name; absent files are skipped."""
    root = Path(root)
    results: dict[str, LoadResult] = {}
    reference = None
    if (root / WEBVOYAGER_REFERENCE).exists():
        reference = load_webvoyager_reference_answers(root / WEBVOYAGER_REFERENCE)
        results["webvoyager_reference_answers"] = reference.result
    if (root / WEBVOYAGER).exists():
        results["webvoyager"] = load_webvoyager(root / WEBVOYAGER, reference)
    if (root / FARA_WEBVOYAGER).exists():
        original = (
            {t.id: t.instruction for t in results["webvoyager"].tasks} if "webvoyager" in results else None
        )
        results["webvoyager_fara"] = load_webvoyager(
            root / FARA_WEBVOYAGER, reference, original, benchmark="WebVoyager (Fara cleaned 2025-08-31)"
        )
    if (root / GAIA_WEB).exists():
        results["gaia_web"] = load_gaia_web(root / GAIA_WEB)
    if (root / ONLINE_MIND2WEB).exists():
        results["online_mind2web"] = load_online_mind2web(root / ONLINE_MIND2WEB)
    if (root / WEBTAILBENCH).exists():
        results["webtailbench"] = load_webtailbench(root / WEBTAILBENCH, start_url)
    return results
