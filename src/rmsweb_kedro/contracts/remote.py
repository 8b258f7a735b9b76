"""A file this project reads from a public home, pinned by its digest, and how it is fetched: the benchmarks' task
files (``tasks/benchmarks/download.py``) and the judges' official prompt sources (``judges/prompts.py``) are both
such files, fetched by one :func:`download` (``python -m rmsweb_kedro.tasks.benchmarks download``).

Each file's SHA-256 as copied into this project's ``shared/benchmarks`` is recorded: a different digest means
upstream changed the file since, which is logged (results on a changed file are not comparable) but not fatal.
"""

from __future__ import annotations

import hashlib
import logging
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

RAW_GITHUB = "https://raw.githubusercontent.com"


@dataclass(frozen=True)
class RemoteFile:
    name: str  # the local file name the loaders expect
    url: str
    sha256: str  # the digest of the copy this project was tested on


def mirrored(base_url: str, files: tuple[RemoteFile, ...]) -> tuple[RemoteFile, ...]:
    """The same files fetched from ``<base_url>/<name>`` (an internal mirror or a local copy served over HTTP)."""
    return tuple(RemoteFile(f.name, f"{base_url.rstrip('/')}/{f.name}", f.sha256) for f in files)


class DownloadError(RuntimeError):
    """A file could not be fetched; the message says which, from where, why, and what to do instead."""


def download(dest: Path | str, files: tuple[RemoteFile, ...], timeout_s: float = 30.0) -> dict[str, Path]:
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
