"""Download the benchmark task files and the official judge prompts from their public homes
(raw.githubusercontent.com) for users with a network.

Files are written under the standard names the loaders use (see :func:`loaders.load_folder`). Each file's
SHA-256 as copied into this project's ``shared/benchmarks`` is recorded: a different digest means upstream
changed the file since, which is logged (results on a changed task list are not comparable) but not fatal.
"""

from __future__ import annotations

import hashlib
import logging
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from rmsweb_kedro.tasks.benchmarks import loaders

logger = logging.getLogger(__name__)

_RAW = "https://raw.githubusercontent.com"


@dataclass(frozen=True)
class RemoteFile:
    name: str  # the local file name the loaders expect
    url: str
    sha256: str  # the digest of the copy this project was tested on


REMOTE_FILES: tuple[RemoteFile, ...] = (
    RemoteFile(
        loaders.WEBVOYAGER,
        f"{_RAW}/MinorJerry/WebVoyager/main/data/WebVoyager_data.jsonl",
        "69b19fd86c23f1a500244a3724e039aa7ca6a1223d03e11eb10e308d4f11c488",
    ),
    RemoteFile(
        loaders.WEBVOYAGER_REFERENCE,
        f"{_RAW}/MinorJerry/WebVoyager/main/data/reference_answer.json",
        "5473818408d8a19960c4f820c1e5721d218b87b547499d7281c2a0fc4267b0c4",
    ),
    RemoteFile(
        loaders.GAIA_WEB,
        f"{_RAW}/MinorJerry/WebVoyager/main/data/GAIA_web.jsonl",
        "3b801188b17cb07d909dee66edffd1500759bc9faed107d6f3475a853b6fdbf3",
    ),
    RemoteFile(
        loaders.FARA_WEBVOYAGER,
        f"{_RAW}/microsoft/fara/main/webeval/data/webvoyager/WebVoyager_data_08312025.jsonl",
        "5c8cb175fdac7a5ee7a2fa8d15de5dad96c617d86f2cb011853997ee23626b9f",
    ),
    RemoteFile(
        loaders.ONLINE_MIND2WEB,
        f"{_RAW}/microsoft/fara/main/webeval/data/om2w/Online_Mind2Web_06042025.json",
        "e4bb090a72d8d57d300f358df906ffc0f6838750bc9e8112354e7a81a3c29c07",
    ),
    RemoteFile(
        loaders.WEBTAILBENCH,
        f"{_RAW}/browserbase/stagehand/main/packages/evals/datasets/webtailbench/WebTailBench_data.jsonl",
        "0a7911b59d2b09731e18efa2cd4f258da9db599b57cb0a389bdd736d0c07b590",
    ),
)


@dataclass(frozen=True)
class PromptFile(RemoteFile):
    """A benchmark's official evaluation source, pinned at a commit, whose prompt texts a judge uses verbatim
    (:mod:`rmsweb_kedro.agents.judge_prompts`)."""

    protocol: str = ""

    @property
    def ref(self) -> str:
        """``owner/repo@commit:path`` of the pinned file."""
        owner, repo, commit, path = self.url.removeprefix(f"{_RAW}/").split("/", 3)
        return f"{owner}/{repo}@{commit}:{path}"


#: The official judge prompts, beside the task files under ``prompts/``. Online-Mind2Web's WebJudge is read from
#: the copy of the benchmark's evaluation code in microsoft/fara (the same repository as its task file); WebVoyager's
#: auto-evaluation from its own repository.
PROMPT_FILES: tuple[PromptFile, ...] = (
    PromptFile(
        "prompts/online_mind2web_webjudge.py",
        f"{_RAW}/microsoft/fara/3f3f1fd82cc2769a6630932d1670bac7349f4a42/webeval/src/webeval/benchmarks/om2w/"
        "impl/src/methods/webjudge_online_mind2web.py",
        "90a8d7a0d8cdadff0a111d2ce13085ced86a028e9f59abe003d64869b5e42d1b",
        protocol="online-mind2web/webjudge",
    ),
    PromptFile(
        "prompts/webvoyager_auto_eval.py",
        f"{_RAW}/MinorJerry/WebVoyager/5a7896738c10bfb8b9edccce6bb0e0411f8ae569/evaluation/auto_eval.py",
        "eb86b5a06e4fca1c483ce9a93812d505b69502d8ed3a6620affe14a188503f98",
        protocol="webvoyager/auto-eval",
    ),
)


def mirrored(base_url: str, files: tuple[RemoteFile, ...] = REMOTE_FILES) -> tuple[RemoteFile, ...]:
    """The same files fetched from ``<base_url>/<name>`` (an internal mirror or a local copy served over HTTP)."""
    return tuple(RemoteFile(f.name, f"{base_url.rstrip('/')}/{f.name}", f.sha256) for f in files)


class DownloadError(RuntimeError):
    """A file could not be fetched; the message says which, from where, why, and what to do instead."""


def download(
    dest: Path | str, files: tuple[RemoteFile, ...] = REMOTE_FILES, timeout_s: float = 30.0
) -> dict[str, Path]:
    """Fetch ``files`` into ``dest`` (created); returns name -> path. Raises :class:`DownloadError`.

    Each file is written to a temporary name and renamed when complete, so an interrupted run leaves no
    half-written task file behind.
    """
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    for remote in files:
        target = dest / remote.name
        try:
            with urllib.request.urlopen(remote.url, timeout=timeout_s) as response:
                content = response.read()
        except (urllib.error.URLError, TimeoutError, OSError) as err:
            reason = getattr(err, "reason", err)
            raise DownloadError(
                f"could not download {remote.name} from {remote.url}: {reason}. "
                f"Is there a network connection? Without one, copy the benchmark files by hand into {dest} "
                f"(names and sources: docs/evaluate.md)."
            ) from None
        digest = hashlib.sha256(content).hexdigest()
        if digest != remote.sha256:
            logger.warning(
                "%s changed upstream since this project was tested (sha256 %s, expected %s); results on it are "
                "not comparable with published ones",
                remote.name,
                digest,
                remote.sha256,
            )
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(target.name + ".part")
        partial.write_bytes(content)
        partial.replace(target)
        written[remote.name] = target
        logger.info("downloaded %s (%d bytes) to %s", remote.url, len(content), target)
    return written
