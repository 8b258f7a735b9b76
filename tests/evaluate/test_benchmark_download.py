"""The download command: its URL table, a real download from a local HTTP server, and the no-network error."""

from __future__ import annotations

import functools
import hashlib
import socket
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlparse

import pytest

from rmsweb_kedro.contracts.remote import DownloadError, RemoteFile, download, mirrored
from rmsweb_kedro.judges.prompts import PROMPT_FILES, load_prompts
from rmsweb_kedro.tasks.benchmarks import loaders
from rmsweb_kedro.tasks.benchmarks.__main__ import main
from rmsweb_kedro.tasks.benchmarks.download import REMOTE_FILES
from tests.evaluate.conftest import FIXTURES

# The repositories and paths SOURCES.md names for each file.
EXPECTED_HOMES = {
    loaders.WEBVOYAGER: "/MinorJerry/WebVoyager/main/data/WebVoyager_data.jsonl",
    loaders.WEBVOYAGER_REFERENCE: "/MinorJerry/WebVoyager/main/data/reference_answer.json",
    loaders.GAIA_WEB: "/MinorJerry/WebVoyager/main/data/GAIA_web.jsonl",
    loaders.FARA_WEBVOYAGER: "/microsoft/fara/main/webeval/data/webvoyager/WebVoyager_data_08312025.jsonl",
    loaders.ONLINE_MIND2WEB: "/microsoft/fara/main/webeval/data/om2w/Online_Mind2Web_06042025.json",
    loaders.WEBTAILBENCH: "/browserbase/stagehand/main/packages/evals/datasets/webtailbench/WebTailBench_data.jsonl",
}


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # nothing listens there once the probe closes


def test_url_table_points_at_the_public_homes():
    assert {f.name: urlparse(f.url).path for f in REMOTE_FILES} == EXPECTED_HOMES
    assert all(
        urlparse(f.url).scheme == "https" and urlparse(f.url).netloc == "raw.githubusercontent.com"
        for f in REMOTE_FILES
    )
    assert all(len(f.sha256) == 64 for f in REMOTE_FILES)


def test_recorded_digests_match_the_shared_copies(shared_benchmarks):
    for remote in REMOTE_FILES:
        assert hashlib.sha256((shared_benchmarks / remote.name).read_bytes()).hexdigest() == remote.sha256, (
            remote.name
        )


def test_no_network_gives_a_clear_error_and_writes_nothing(tmp_path):
    url = f"http://127.0.0.1:{closed_port()}/WebVoyager_data.jsonl"
    with pytest.raises(DownloadError) as caught:
        download(tmp_path / "bench", (RemoteFile(loaders.WEBVOYAGER, url, "0" * 64),), timeout_s=5)
    message = str(caught.value)
    assert f"could not download {loaders.WEBVOYAGER} from {url}" in message
    assert "network connection" in message and "docs/evaluate.md" in message
    assert list((tmp_path / "bench").iterdir()) == []


def test_command_exits_2_with_the_message_when_offline(tmp_path, capsys):
    assert (
        main(
            [
                "download",
                "--dest",
                str(tmp_path),
                "--mirror",
                f"http://127.0.0.1:{closed_port()}",
                "--timeout",
                "5",
            ]
        )
        == 2
    )
    assert "error: could not download WebVoyager_data.jsonl" in capsys.readouterr().err


@pytest.fixture()
def fixture_mirror(tmp_path):
    """The fixture rows served under the standard names by a real HTTP server on 127.0.0.1."""
    served = tmp_path / "served"
    served.mkdir()
    names = {
        loaders.WEBVOYAGER: "webvoyager.jsonl",
        loaders.WEBVOYAGER_REFERENCE: "webvoyager_reference.json",
        loaders.GAIA_WEB: "gaia_web.jsonl",
        loaders.FARA_WEBVOYAGER: "fara_webvoyager.jsonl",
        loaders.ONLINE_MIND2WEB: "online_mind2web.json",
        loaders.WEBTAILBENCH: "webtailbench.jsonl",
    }
    for name, fixture in names.items():
        (served / name).write_bytes((FIXTURES / fixture).read_bytes())
    # Stand-ins of the official prompt files (the real ones are never committed): same names, other contents.
    (served / "prompts").mkdir()
    for remote in PROMPT_FILES:
        (served / remote.name).write_text('SYSTEM_PROMPT = "stand-in"\n')
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(served))
    handler.log_message = lambda *args: None
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_download_then_load_from_a_mirror(fixture_mirror, tmp_path, caplog, capsys):
    dest = tmp_path / "data" / "01_raw" / "benchmarks"
    assert main(["download", "--dest", str(dest), "--mirror", fixture_mirror]) == 0
    files = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file())
    assert files == sorted(
        f.name for f in REMOTE_FILES + PROMPT_FILES
    )  # prompts/ beside the tasks, no .part left
    # The fixtures are not the published files: each is reported as changed upstream.
    assert sum("changed upstream" in r.message for r in caplog.records) == len(REMOTE_FILES + PROMPT_FILES)
    # A prompt file that is not the pinned one is never used as official: the judges fall back, saying so.
    for remote in PROMPT_FILES:
        assert load_prompts(remote.protocol, dest).source == "project"
    results = loaders.load_folder(dest)
    assert results["webvoyager"].counts() == {"rows_in": 10, "accepted": 4, "quarantined": 6}
    assert results["online_mind2web"].counts()["accepted"] == 3
    assert main(["check", "--root", str(dest)]) == 0
    out = capsys.readouterr().out
    assert "webtailbench\t4 in\t2 accepted\t2 quarantined" in out
    assert f"{loaders.WEBTAILBENCH}:3 hotels_9 [precomputed_rubric.items]" in out


def test_only_prompts(fixture_mirror, tmp_path):
    dest = tmp_path / "bench"
    assert main(["download", "--dest", str(dest), "--mirror", fixture_mirror, "--only", "prompts"]) == 0
    assert sorted(p.name for p in dest.iterdir()) == ["prompts"]
    assert sorted(p.name for p in (dest / "prompts").iterdir()) == sorted(
        Path(f.name).name for f in PROMPT_FILES
    )


def test_mirrored_keeps_names_and_digests():
    mirror = mirrored("http://mirror.local/bench/", REMOTE_FILES)
    assert [(f.name, f.sha256) for f in mirror] == [(f.name, f.sha256) for f in REMOTE_FILES]
    assert mirror[0].url == f"http://mirror.local/bench/{REMOTE_FILES[0].name}"
