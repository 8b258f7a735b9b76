"""Command line: ``serve`` the sandbox for a person (playing every reference solution in Chromium is
``python -m rmsweb_kedro.episodes.solve``, above the rollout engine).

python -m rmsweb_kedro.web.sandbox serve --port 8765
"""

from __future__ import annotations

import argparse
import logging
import time

from rmsweb_kedro.web.sandbox.server import SandboxServer


def serve(port: int, seed: int) -> None:
    with SandboxServer(port=port, seed=seed) as server:
        print(
            f"Sandbox on http://127.0.0.1:{server.port}/ (sites at /shop/, /flights/, ...). Ctrl-C stops it."
        )
        print(f'Chromium flag for the stable URLs: --host-resolver-rules="{server.host_resolver_rules}"')
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m rmsweb_kedro.web.sandbox")
    commands = parser.add_subparsers(dest="command", required=True)
    serve_cmd = commands.add_parser("serve", help="serve the sandbox sites until Ctrl-C")
    serve_cmd.add_argument("--port", type=int, default=8765)
    serve_cmd.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    serve(args.port, args.seed)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
