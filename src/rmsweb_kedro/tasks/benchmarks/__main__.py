"""``python -m rmsweb_kedro.tasks.benchmarks download --dest data/01_raw/benchmarks``: fetch the task files and the
official judge prompts (``prompts/``, at pinned commits; ``--only tasks|prompts`` for one kind);
``... check --root DIR``: load every file found and print accepted/quarantined counts."""

from __future__ import annotations

import argparse
import logging
import sys

from rmsweb_kedro.contracts.remote import DownloadError, download, mirrored
from rmsweb_kedro.judges.prompts import PROMPT_FILES
from rmsweb_kedro.tasks.benchmarks.download import REMOTE_FILES
from rmsweb_kedro.tasks.benchmarks.loaders import BenchmarkFileError, load_folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rmsweb_kedro.tasks.benchmarks", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    fetch = commands.add_parser("download", help="download the benchmark task files from their public homes")
    fetch.add_argument("--dest", default="data/01_raw/benchmarks")
    fetch.add_argument("--timeout", type=float, default=30.0, help="seconds per file")
    fetch.add_argument("--mirror", help="fetch <MIRROR>/<file name> instead of the public homes")
    fetch.add_argument(
        "--only", choices=["tasks", "prompts"], help="the task files or the judge prompts only"
    )
    check = commands.add_parser("check", help="load every benchmark file in a folder and print the counts")
    check.add_argument("--root", default="data/01_raw/benchmarks")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    try:
        if args.command == "download":
            chosen = {"tasks": REMOTE_FILES, "prompts": PROMPT_FILES}.get(
                args.only, REMOTE_FILES + PROMPT_FILES
            )
            files = mirrored(args.mirror, chosen) if args.mirror else chosen
            for name, path in download(args.dest, files, timeout_s=args.timeout).items():
                print(f"{name}\t{path}")
        else:
            results = load_folder(args.root)
            if not results:
                print(f"no benchmark files found in {args.root}", file=sys.stderr)
                return 1
            for name, result in results.items():
                counts = result.counts()
                print(
                    f"{name}\t{counts['rows_in']} in\t{counts['accepted']} accepted\t{counts['quarantined']} quarantined"
                )
                for row in result.quarantine:
                    print(
                        f"  {row['source_file']}:{row['line']} {row['record_id']} [{row['field']}] {row['reason']}"
                    )
    except (DownloadError, BenchmarkFileError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
