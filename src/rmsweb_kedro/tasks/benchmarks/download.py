"""The benchmark task files' public homes (raw.githubusercontent.com), pinned by digest, for users with a network
(fetched by :func:`rmsweb_kedro.contracts.remote.download`; the judges' prompt files are
:data:`rmsweb_kedro.judges.prompts.PROMPT_FILES`).

Files are written under the standard names the loaders use (see :func:`loaders.load_folder`). Each file's
SHA-256 as copied into this project's ``shared/benchmarks`` is recorded: a different digest means upstream
changed the file since, which is logged (results on a changed task list are not comparable) but not fatal.
"""

from __future__ import annotations

from rmsweb_kedro.contracts.remote import RAW_GITHUB, RemoteFile
from rmsweb_kedro.tasks.benchmarks import loaders

REMOTE_FILES: tuple[RemoteFile, ...] = (
    RemoteFile(
        loaders.WEBVOYAGER,
        f"{RAW_GITHUB}/MinorJerry/WebVoyager/main/data/WebVoyager_data.jsonl",
        "69b19fd86c23f1a500244a3724e039aa7ca6a1223d03e11eb10e308d4f11c488",
    ),
    RemoteFile(
        loaders.WEBVOYAGER_REFERENCE,
        f"{RAW_GITHUB}/MinorJerry/WebVoyager/main/data/reference_answer.json",
        "5473818408d8a19960c4f820c1e5721d218b87b547499d7281c2a0fc4267b0c4",
    ),
    RemoteFile(
        loaders.GAIA_WEB,
        f"{RAW_GITHUB}/MinorJerry/WebVoyager/main/data/GAIA_web.jsonl",
        "3b801188b17cb07d909dee66edffd1500759bc9faed107d6f3475a853b6fdbf3",
    ),
    RemoteFile(
        loaders.FARA_WEBVOYAGER,
        f"{RAW_GITHUB}/microsoft/fara/main/webeval/data/webvoyager/WebVoyager_data_08312025.jsonl",
        "5c8cb175fdac7a5ee7a2fa8d15de5dad96c617d86f2cb011853997ee23626b9f",
    ),
    RemoteFile(
        loaders.ONLINE_MIND2WEB,
        f"{RAW_GITHUB}/microsoft/fara/main/webeval/data/om2w/Online_Mind2Web_06042025.json",
        "e4bb090a72d8d57d300f358df906ffc0f6838750bc9e8112354e7a81a3c29c07",
    ),
    RemoteFile(
        loaders.WEBTAILBENCH,
        f"{RAW_GITHUB}/browserbase/stagehand/main/packages/evals/datasets/webtailbench/WebTailBench_data.jsonl",
        "0a7911b59d2b09731e18efa2cd4f258da9db599b57cb0a389bdd736d0c07b590",
    ),
)
