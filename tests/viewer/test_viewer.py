"""The viewer in real Chromium over a small real run (every stage of the recipe, tiny model, real sandbox), started
as users start it (``python -m rmsweb_kedro.viewer``) in a process that ends with the module.

The tiny model fails every task, so a perfect scripted teacher is evaluated on the same tasks by the same function
(``evaluation.run_online``) and its episodes appended to the run's tables as a fourth model: the run then has
successes beside failures (the "A succeeds, B fails" filter has rows) and clicks and typing to draw."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import polars as pl
import pytest

from tests.fixtures_web import chromium_available
from tests.viewer.tiny_run import TINY, build

pytestmark = [pytest.mark.browser, pytest.mark.slow]

RUN_PARAMS = TINY | {"sandbox": {"instances_per_template": 7}}
EPISODES = "data/07_model_output/evaluate/online_episodes.parquet"
STEPS = "data/07_model_output/evaluate/online_steps.parquet"


def _add_teacher(project: Path) -> None:
    """The scripted teacher's episodes on the run's evaluation tasks, appended as model ``teacher``."""
    from rmsweb_kedro.agents.scripted import ScriptedTeacher, TeacherImperfections
    from rmsweb_kedro.measures.evaluation import EvaluateParams, run_online

    online = RUN_PARAMS["evaluate"]["online"] | {
        "episodes_root": str(project / "data/07_model_output/evaluate/episodes")
    }
    config = EvaluateParams.model_validate({"online": online | {"max_steps": 14}})
    tasks = pl.read_parquet(project / "data/01_raw/sandbox/sandbox_tasks.parquet")
    teacher = ScriptedTeacher(seed=0, imperfections=TeacherImperfections(mistake_probs={}))
    episodes, steps = run_online(tasks, teacher, config, "teacher")
    for path, extra in ((project / EPISODES, episodes), (project / STEPS, steps)):
        pl.concat([pl.read_parquet(path), extra]).write_parquet(path)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    if not chromium_available():
        pytest.skip("Chromium is not installed (set RMSWEB_CHROMIUM)")
    project = build(tmp_path_factory.mktemp("viewer_run"), RUN_PARAMS)
    _add_teacher(project)
    return project


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(project: Path, *args: str) -> tuple[subprocess.Popen, str]:
    """``python -m rmsweb_kedro.viewer`` over ``project`` (``args``: more of its options) on a free port of
    127.0.0.1, once it answers; its process and URL."""
    port = _free_port()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(Path(__file__).parents[2] / "src"), os.environ.get("PYTHONPATH", "")]
        ),
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "rmsweb_kedro.viewer", "--project", str(project), "--port", str(port), *args],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the viewer exited: {process.stdout.read().decode()}")
        try:
            urllib.request.urlopen(url + "/evaluation", timeout=5)
            return process, url
        except (urllib.error.URLError, ConnectionError):
            time.sleep(0.3)
    process.kill()
    raise RuntimeError("the viewer did not answer within 90 s")


def _stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    assert process.poll() is not None


@pytest.fixture(scope="module")
def viewer(run_dir) -> Iterator[str]:
    process, url = _start(run_dir)
    yield url
    _stop(process)


@pytest.fixture(scope="module")
def page(viewer):
    from playwright.sync_api import sync_playwright

    from rmsweb_kedro.web.browser import BrowserConfig

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=BrowserConfig().executable_path())
        context = browser.new_context(viewport={"width": 1300, "height": 900}, accept_downloads=True)
        yield context.new_page()
        browser.close()


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, response.read().decode(errors="replace")
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(errors="replace")


# ---------------------------------------------------------------- tabs


def test_every_tab_opens_with_this_runs_rows(page, viewer, run_dir):
    page.goto(f"{viewer}/collection")
    log = pl.read_parquet(run_dir / "data/02_intermediate/collect/collection_log.parquet")
    tasks = page.locator("table.rows a").all_inner_texts()
    assert sorted(tasks) == sorted(set(log["task_id"]))
    page.goto(f"{viewer}/mining")
    critical = pl.read_parquet(run_dir / "data/05_model_input/critical_states.parquet")
    assert page.locator("table.rows a").count() == min(critical.height, 50) > 0
    page.goto(f"{viewer}/salvage")
    metrics = pl.read_parquet(run_dir / "data/08_reporting/salvage_ds/metrics.parquet")
    tables = page.locator("table.rows")
    assert tables.nth(0).locator("tr").count() == metrics["seed"].n_unique() + 1  # a line a training seed
    # the figures, not a wide table of floats: each is a PNG the page shows
    images = page.locator("figure.plot img")
    assert images.count() == 3 and all(images.nth(i).evaluate("i => i.naturalWidth") > 0 for i in range(3))
    assert _get(f"{viewer}/figure?name=sft_model")[0] == 403  # only the tab's figures are served
    # every sampled group, with the gate's decision; per batch they add up to the update's logged counts
    groups = pl.read_parquet(run_dir / "data/08_reporting/salvage_ds/groups.parquet")
    assert tables.nth(1).locator("tr").count() == groups.height + 1 > 1
    assert set(groups["decision"]) <= {"accepted", "anchored", "rejected", "surplus"}
    for (seed, batch), mine in groups.group_by("seed", "batch"):
        update = metrics.filter((pl.col("seed") == seed) & (pl.col("step") == batch + 1)).row(0, named=True)
        assert mine.height == update["train/groups"]  # updates_per_batch 1: batch k is update k + 1
        assert mine["decision"].is_in(["accepted", "anchored"]).sum() == update["train/trained_groups"]
    page.goto(f"{viewer}/evaluation")
    assert (
        page.locator("table.rows tr").count() - 1 == pl.read_parquet(run_dir / EPISODES)["task_id"].n_unique()
    )
    page.goto(f"{viewer}/live")
    assert "Live: not in this run" in page.locator(".not-in-run").inner_text()


def test_a_collection_task_shows_attempts_verdicts_and_reflections_in_order(page, viewer, run_dir):
    log = pl.read_parquet(run_dir / "data/02_intermediate/collect/collection_log.parquet")
    retried = log.group_by("task_id").len().sort("len", "task_id", descending=[True, False])["task_id"][0]
    page.goto(f"{viewer}/collection?task={retried}")
    attempts = log.filter(pl.col("task_id") == retried).sort("mode", "attempt")
    sections = page.locator("section.attempt")
    assert sections.count() == attempts.height
    for i, row in enumerate(attempts.iter_rows(named=True)):
        section = sections.nth(i)
        outcome = {True: "success", False: "failure"}.get(row["success"], row["termination"])
        assert section.locator(".outcome").inner_text() == outcome
        assert f"attempt {row['attempt']}" in section.locator("h3").inner_text()
        if row["reflection_after"]:
            assert row["reflection_after"].strip() in section.locator(".reflection pre").inner_text()
        if row["success"]:  # the shortened trajectory beside it; what it dropped is marked as removed
            kept = section.locator(".shortened .step").count()
            assert kept > 0 and section.locator(".step:not(.removed)").count() == 2 * kept


def test_a_mined_state_shows_samples_with_rewards_and_competence(page, viewer, run_dir):
    critical = pl.read_parquet(run_dir / "data/05_model_input/critical_states.parquet")
    state = critical.row(0, named=True)
    page.goto(f"{viewer}/mining")
    page.get_by_role("link", name=state["state_id"], exact=True).click()
    assert parse_qs(urlparse(page.url).query)["id"] == [state["state_id"]]  # a shareable link
    facts = page.locator("table.facts").inner_text()
    assert state["reference_action"] in facts and str(state["competence"]) in facts
    assert str(state["in_sft"]) in facts and state["origin"] in facts  # why it is critical (or ballast)
    rewards = [float(r) for r in page.locator("table.samples tr td:nth-child(2)").all_inner_texts()]
    assert len(rewards) == state["n_samples"] == len(state["sampled_actions"])
    right = sum(r > 0 for r in rewards)  # the polarized rewards agree with the competence
    assert right / len(rewards) == pytest.approx(state["competence"])
    # the online rollouts the states came from, step by step
    rollouts = pl.read_parquet(run_dir / "data/07_model_output/mining/online_steps.parquet")
    rollout = rollouts["trajectory_id"][0]
    page.goto(f"{viewer}/mining")
    page.get_by_role("link", name=rollout, exact=True).click()
    listed = page.locator("p", has_text="all steps:").locator("a").all_inner_texts()
    assert len(listed) == rollouts.filter(pl.col("trajectory_id") == rollout).height


# ---------------------------------------------------------------- evaluation


def test_stepping_through_an_episode_shows_each_steps_file_and_target_box(page, viewer, run_dir):
    steps = pl.read_parquet(run_dir / STEPS).filter(pl.col("model") == "teacher")
    episode = steps.filter(pl.col("target_box").is_not_null())["task_id"][0]
    mine = steps.filter(pl.col("task_id") == episode).sort("index")
    page.goto(f"{viewer}/episode?stage=evaluate&model=teacher&run=0&task={episode}")
    boxes = 0
    for row in mine.iter_rows(named=True):
        step = page.locator(".step")
        assert step.get_attribute("data-index") == str(row["index"])
        image = step.locator("img")
        shown = parse_qs(urlparse(image.get_attribute("src")).query)
        assert shown == {"root": ["evaluate"], "path": [row["screenshot"]]}
        natural = image.evaluate("i => [i.naturalWidth, i.naturalHeight]")
        assert natural[0] > 0  # the file was served and decoded
        if row["target_box"]:
            boxes += 1
            drawn = step.locator(".target")
            assert [float(v) for v in drawn.get_attribute("data-box").split(",")] == row["target_box"]
            shown_image, shown_box = image.bounding_box(), drawn.bounding_box()
            scale = shown_image["width"] / natural[0]
            assert shown_box["x"] - shown_image["x"] == pytest.approx(row["target_box"][0] * scale, abs=2)
            assert shown_box["y"] - shown_image["y"] == pytest.approx(row["target_box"][1] * scale, abs=2)
            assert shown_box["width"] == pytest.approx(row["target_box"][2] * scale, abs=2)
        if row["index"] < mine["index"].max():
            page.locator("a.next-step").click()
    assert boxes >= 1


def test_the_pair_filter_matches_online_episodes(page, viewer, run_dir):
    episodes = pl.read_parquet(run_dir / EPISODES)

    def outcome(model: str) -> pl.DataFrame:
        mine = episodes.filter(pl.col("model") == model)
        return mine.select("task_id", "run", pl.col("success").alias(model))

    for a, b, pair, want in (("teacher", "sft", "a_only", (True, False)), ("base", "sft", "neither", (False, False)),
                             ("sft", "teacher", "a_only", (True, False))):  # fmt: skip
        page.goto(f"{viewer}/evaluation")
        page.select_option("select[name=a]", a)
        page.select_option("select[name=b]", b)
        page.select_option("select[name=pair]", pair)
        page.locator("form.filters button").click()
        page.wait_for_load_state()
        shown = sorted(page.locator("table.rows tr td:first-child").all_inner_texts())
        both = outcome(a).join(outcome(b), on=["task_id", "run"])
        expected = sorted(both.filter((pl.col(a) == want[0]) & (pl.col(b) == want[1]))["task_id"])
        assert shown == expected, (a, b, pair)
        if a == "teacher":
            assert expected  # the teacher solved some task the SFT model failed
    assert len(expected) == 0 and episodes.filter(pl.col("model") == "teacher")["success"].any()


def test_models_side_by_side_mark_where_each_leaves_the_reference(page, viewer, run_dir):
    episodes = pl.read_parquet(run_dir / EPISODES)
    task = episodes.filter(pl.col("diverged_at").is_not_null())["task_id"][0]
    page.goto(f"{viewer}/evaluation/task?task={task}&run=0")
    for row in episodes.filter(pl.col("task_id") == task).iter_rows(named=True):
        column = page.locator(f".model[data-model='{row['model']}']")
        marked = column.locator(".step.diverged")
        if row["diverged_at"] is None:
            assert marked.count() == 0
        else:
            assert marked.count() == 1 and marked.get_attribute("data-index") == str(row["diverged_at"])


def test_an_exported_episode_opens_offline_with_its_screenshots(page, viewer, run_dir, tmp_path):
    task = pl.read_parquet(run_dir / STEPS).filter(pl.col("model") == "teacher")["task_id"][0]
    page.goto(f"{viewer}/episode?stage=evaluate&model=teacher&run=0&task={task}")
    with page.expect_download() as download:
        page.locator("a.export").click()
    path = tmp_path / "episode.html"
    download.value.save_as(path)
    offline = page.context.browser.new_context(offline=True)
    try:
        view = offline.new_page()
        view.goto(path.as_uri())
        images = view.locator("img")
        n_steps = (
            pl.read_parquet(run_dir / STEPS)
            .filter((pl.col("model") == "teacher") & (pl.col("task_id") == task))
            .height
        )
        assert view.locator(".step").count() == n_steps == images.count()
        for i in range(images.count()):
            assert images.nth(i).get_attribute("src").startswith("data:image/png;base64,")
            assert images.nth(i).evaluate("i => i.complete && i.naturalWidth > 0")
    finally:
        offline.close()


# ---------------------------------------------------------------- bad input


def test_files_outside_the_run_are_refused(viewer, run_dir):
    outside = run_dir / "data/07_model_output/evaluate/episodes/escape.png"
    outside.symlink_to(run_dir / "pyproject.toml")
    for query in ("root=evaluate&path=../../../../pyproject.toml", "root=evaluate&path=%2e%2e/%2e%2e/online_steps.parquet",
                  f"root=evaluate&path={run_dir / 'pyproject.toml'}", "root=conf&path=base/globals.yml",
                  "root=evaluate&path=escape.png", "root=raw&path=..%5C..%5Cpyproject.toml"):  # fmt: skip
        status, body = _get(f"{viewer}/file?{query}")
        assert status == 403 and "refused" in body, query
    step = pl.read_parquet(run_dir / STEPS)["screenshot"][0]
    assert _get(f"{viewer}/file?root=evaluate&path={step}")[0] == 200


def test_missing_and_broken_inputs_are_named(run_dir, tmp_path):
    """A copy of the run with a screenshot gone, one corrupt, an older online_episodes (no divergence_mode), no
    mining outputs: placeholders with the reason, the missing column named, "not in this run"."""
    broken = tmp_path / "broken"
    shutil.copytree(run_dir, broken, ignore=shutil.ignore_patterns("06_models"))
    steps = pl.read_parquet(broken / STEPS).filter(pl.col("model") == "teacher")
    task = steps["task_id"][0]
    first, second = steps.filter(pl.col("task_id") == task).sort("index")["screenshot"][:2]
    (broken / "data/07_model_output/evaluate/episodes" / first).unlink()
    (broken / "data/07_model_output/evaluate/episodes" / second).write_bytes(b"not an image")
    pl.read_parquet(broken / EPISODES).drop("divergence_mode").write_parquet(broken / EPISODES)
    for name in ("05_model_input/critical_states.parquet", "07_model_output/mining/offline_probes.parquet",
                 "07_model_output/mining/online_probes.parquet", "07_model_output/mining/online_steps.parquet"):  # fmt: skip
        (broken / "data" / name).unlink()
    process, url = _start(broken)
    try:
        status, html = _get(f"{url}/episode?stage=evaluate&model=teacher&run=0&task={task}&step=0")
        assert status == 200 and "screenshot missing" in html and first in html
        status, html = _get(f"{url}/episode?stage=evaluate&model=teacher&run=0&task={task}&step=1")
        assert "screenshot unreadable" in html and "not a PNG file" in html
        status, html = _get(f"{url}/evaluation")
        assert "has no column divergence_mode" in html and "older version" in html
        status, html = _get(f"{url}/mining")
        assert "Mining: not in this run" in html
    finally:
        _stop(process)


def test_kedro_viewer_is_a_project_command():
    from click.testing import CliRunner

    from rmsweb_kedro.cli import cli

    result = CliRunner().invoke(cli, ["viewer", "--help"])
    assert result.exit_code == 0 and "127.0.0.1" in result.output
