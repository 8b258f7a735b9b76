"""Start the viewer: the run's catalog for a Kedro environment, the app, and uvicorn bound to loopback unless told
otherwise."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from pathlib import Path

logger = logging.getLogger(__name__)

#: Bind addresses that are every interface, not a name a request is addressed to.
WILDCARDS = ("0.0.0.0", "::", "")


def serve(
    project: str | Path = ".",
    env: str | None = None,
    host: str = "127.0.0.1",
    port: int = 7860,
    allowed_hosts: Sequence[str] = (),
) -> None:
    """Serve the viewer over the outputs of the project at ``project`` in environment ``env`` until interrupted.
    It answers requests addressed to loopback names, ``host`` (unless a wildcard) and ``allowed_hosts``."""
    import uvicorn

    from rmsweb_kedro.viewer.app import LOOPBACK_HOSTS, create_app
    from rmsweb_kedro.viewer.run import Run

    run = Run(project, env)
    allowed = list(allowed_hosts) + ([host] if host not in WILDCARDS else [])
    if host not in (*LOOPBACK_HOSTS, "::1"):
        logger.warning(
            "viewer: listening on %s: anyone who can reach it can read this run's episodes (requests addressed "
            "to %s)",
            host,
            ", ".join([*LOOPBACK_HOSTS, *allowed]),
        )
    print(f"viewer: {run.project} (env {run.env}) on http://{host}:{port}/", flush=True)
    uvicorn.run(create_app(run, allowed), host=host, port=port, log_level="warning")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m rmsweb_kedro.viewer", description=__doc__)
    parser.add_argument("--project", default=".", help="the Kedro project folder (default: here)")
    parser.add_argument("--env", default=None, help="the Kedro environment the run used (default: local)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    parser.add_argument("--port", type=int, default=7860)
    parser.add_argument(
        "--allow-host",
        action="append",
        default=[],
        help="a name requests may be addressed to besides 127.0.0.1 and localhost (repeatable), e.g. this "
        "machine's name when --host 0.0.0.0",
    )
    args = parser.parse_args(argv)
    serve(args.project, args.env, args.host, args.port, args.allow_host)
