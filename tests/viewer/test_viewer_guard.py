"""The viewer protects itself (docs/viewer.md, "What it serves, to whom"), checked on the real server
(``python -m rmsweb_kedro.viewer``, uvicorn on 127.0.0.1) over a small run folder made here: requests addressed to
a host it does not serve as are refused (a page that rebinds its DNS name to 127.0.0.1 reads nothing), and the
only files it hands out are the run's PNG screenshots, not the checkpoints, tables and logs beside them."""

from __future__ import annotations

import http.client
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode, urlparse

import polars as pl
import pytest

from tests.fixtures_model import draw_screenshot
from tests.viewer.test_viewer import _start, _stop
from tests.viewer.tiny_run import copy_project

EPISODES = "data/07_model_output/evaluate/episodes"
SHOT = "sft/r0/task-1/step_000.png"


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A run folder: one evaluation screenshot, and beside it what must not be served: a checkpoint's weights, a
    parquet table (in data/ and inside the screenshot folder), a table renamed .png, a raw trajectory (JSONL in the
    raw screenshot folder), a log, and a link named .png to a PNG outside every screenshot folder."""
    project = copy_project(tmp_path_factory.mktemp("guarded"))
    episodes = project / EPISODES
    draw_screenshot(episodes / SHOT, "the search page")
    (project / "data/06_models/sft_model").mkdir(parents=True)
    (project / "data/06_models/sft_model/model.safetensors").write_bytes(b"\0" * 4096)
    table = pl.DataFrame({"task_id": ["task-1"], "answer": ["secret"]})
    table.write_parquet(project / "data/05_model_input/sft_states_train.parquet")
    table.write_parquet(episodes / "online_steps.parquet")
    table.write_parquet(episodes / "sft/r0/task-1/step_001.png")
    (project / "data/01_raw/trajectories").mkdir(parents=True)
    (project / "data/01_raw/trajectories/task-1.jsonl").write_text('{"task_id": "task-1"}\n')
    (project / "data/07_model_output/evaluate/servers").mkdir(parents=True)
    (project / "data/07_model_output/evaluate/servers/sft_offline.log").write_text("a server's log\n")
    outside = draw_screenshot(project / "data/08_reporting/plot.png", "a plot")
    (episodes / "sft/r0/task-1/escape.png").symlink_to(outside)
    return project


@pytest.fixture(scope="module")
def viewer(project) -> Iterator[str]:
    process, url = _start(project, "--allow-host", "viewer.lab.test")
    yield url
    _stop(process)


def get(url: str, path: str, host: str | None = None) -> tuple[int, str, bytes]:
    """``GET path`` on the viewer at ``url`` with ``Host: host`` (default: the URL's): status, content type, body."""
    address = urlparse(url)
    connection = http.client.HTTPConnection(address.hostname, address.port, timeout=30)
    try:
        connection.request("GET", path, headers={"Host": address.netloc if host is None else host})
        response = connection.getresponse()
        return response.status, response.getheader("content-type", ""), response.read()
    finally:
        connection.close()


def file(root: str, path: str) -> str:
    return "/file?" + urlencode({"root": root, "path": path})


def test_requests_addressed_to_another_host_are_refused(viewer):
    port = urlparse(viewer).port
    for host in ("evil.example", f"evil.example:{port}", f"127.0.0.1.evil.example:{port}", "localhost.evil.example",
                 f"attacker.test:{port}", f"192.168.1.20:{port}", "viewer.lab.test.evil.example", ""):  # fmt: skip
        for path in ("/evaluation", file("evaluate", SHOT)):
            status, _, body = get(viewer, path, host)
            assert status == 400 and b"Invalid host header" in body, (host, path)
    for host in (f"127.0.0.1:{port}", "localhost", f"localhost:{port}", f"[::1]:{port}", f"viewer.lab.test:{port}",
                 f"LOCALHOST:{port}"):  # fmt: skip
        assert get(viewer, "/evaluation", host)[0] == 200, host
        assert get(viewer, file("evaluate", SHOT), host)[0] == 200, host


def test_only_the_runs_screenshots_are_served(viewer, project):
    status, kind, body = get(viewer, file("evaluate", SHOT))
    assert status == 200 and kind == "image/png" and body == (project / EPISODES / SHOT).read_bytes()
    refused = [
        file(
            "project", "06_models/sft_model/model.safetensors"
        ),  # data/ as a whole is no folder of the viewer's
        file("evaluate", "../../../06_models/sft_model/model.safetensors"),
        file("evaluate", "../../../05_model_input/sft_states_train.parquet"),
        file("evaluate", "%2e%2e/servers/sft_offline.log"),
        file("evaluate", "../servers/sft_offline.log"),
        file("evaluate", "online_steps.parquet"),  # inside the screenshot folder, but a table
        file("evaluate", "sft/r0/task-1/step_001.png"),  # a table named .png
        file("evaluate", "sft/r0/task-1/escape.png"),  # a link out to a PNG of no screenshot folder
        file("evaluate", str(project / EPISODES / SHOT)),  # absolute
        file("raw", "task-1.jsonl"),  # the raw folder holds trajectories beside their screenshots
        file("raw", "..\\..\\06_models\\sft_model\\model.safetensors"),
        file("live", "../../06_models/sft_model/model.safetensors"),
    ]
    for path in refused:
        status, _, body = get(viewer, path)
        assert status == 403 and body.startswith(b"refused"), (path, status, body[:200])
        assert b"secret" not in body and b"\0\0\0\0" not in body
    assert get(viewer, file("evaluate", "sft/r0/task-1/step_009.png"))[0] == 404  # a screenshot not kept
