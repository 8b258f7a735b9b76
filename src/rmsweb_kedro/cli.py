"""Project commands Kedro adds to its CLI (``kedro viewer``); Kedro imports this module for every ``kedro`` command
in the project, so it stays light: the viewer is imported when its command runs."""

import click


@click.group(name="rmsweb_kedro")
def cli() -> None:
    """Commands of this project."""


@cli.command()
@click.option("--env", "-e", default=None, help="the Kedro environment the run used (default: local)")
@click.option(
    "--host", default="127.0.0.1", show_default=True, help="address to bind (loopback only by default)"
)
@click.option("--port", default=7860, show_default=True, type=int)
@click.option(
    "--allow-host",
    multiple=True,
    help="a name requests may be addressed to besides 127.0.0.1 and localhost (repeatable)",
)
def viewer(env: str | None, host: str, port: int, allow_host: tuple[str, ...]) -> None:
    """Look at a run's episodes in the browser (docs/viewer.md)."""
    from pathlib import Path

    from kedro.utils import find_kedro_project

    from rmsweb_kedro.viewer import serve

    serve(find_kedro_project(Path.cwd()) or Path.cwd(), env, host, port, allow_host)
