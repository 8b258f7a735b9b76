"""A rollout driver on a local Ray, run by tests/rollouts/test_ray.py as a subprocess inside a loopback-only network
namespace (``ray_command``): ``python -m tests.rollouts.ray_driver SETTINGS_JSON``.

SETTINGS: ``journal`` (path), ``task_ids``, ``browsers``, ``delay_s`` (a pause before each decision, so a test can
kill the driver mid-run), ``kill_marker`` (a path: the agent of ``kill_task`` kills its own actor process once,
mid-episode, and leaves the file so the retry plays on).

On a two-node cluster (tests/rollouts/test_ray.py): ``address`` (the head's; the driver waits for ``nodes`` live
nodes first), ``raw_root`` (relative to the driver's working folder: screenshots go to ``raw_root/<task id>``),
``busy_dir`` (each agent's first decision leaves ``busy_dir/<its node's IP>``), ``kill_node`` (``[IP, PID file]``:
once an agent on that node is mid-episode, the driver SIGKILLs the process in the PID file: the node's namespace
and everything in it), ``result`` (a JSON file: when the node was killed and the run ended; how an episode whose
agent hangs ended under a 2 s hard limit and whether its folder is left; the error of a run that asks for more CPUs
per browser than any live node has; the error of a run whose judge cannot be built).

With ``frozen`` (a path): a frozen page and two calm ones (tests/rollouts/frozen_site.py) on the local Ray; writes
to that JSON file each episode's termination, success, environment errors and wall time, the run's time, and the
Chromium processes left in the driver's PID namespace once the run is over.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

from rmsweb_kedro.agents.scripted import ScriptedTeacher, TeacherImperfections
from rmsweb_kedro.episodes import rollouts
from rmsweb_kedro.episodes.rollouts import EpisodeSpec, Journal, Roles, RolloutConfig, run_rollouts
from rmsweb_kedro.judges.sandbox import SandboxJudge
from rmsweb_kedro.web.sandbox import SandboxParams, generate_tasks
from tests.rollouts import frozen_site

FINGERPRINT = "ray-test"
#: Odd seeds take every wrong decision (the episode fails), even ones none: both outcomes, whatever the backend.
WRONG = TeacherImperfections(mistake_probs={"choose_option": 1.0, "pick_item": 1.0}, self_correct_prob=0.0)
RIGHT = TeacherImperfections(mistake_probs={}, self_correct_prob=0.0)
#: A local Ray small enough for CI: 2 CPUs, half a CPU per browser actor, a minimal object store.
LOCAL_RAY = RolloutConfig(backend="ray", num_cpus=2, object_store_mb=80, cpus_per_browser=0.5)


def episodes(task_ids: list[str], raw_root: str | None = None) -> list[EpisodeSpec]:
    """The seeded episodes both backends run: the scripted teacher, seed by task (see WRONG); with ``raw_root``,
    screenshots in ``raw_root/<task id>`` (paths as given: relative ones are the driver's to resolve)."""
    tasks = {t.id: t for t in generate_tasks(SandboxParams())}
    return [
        EpisodeSpec(
            key=task_id,
            task=tasks[task_id],
            max_steps=20,
            seed=position,
            trajectory_id=f"ray__{task_id}",
            screenshot_dir=None if raw_root is None else f"{raw_root}/{task_id}",
            relative_to=raw_root,
        )
        for position, task_id in enumerate(task_ids)
    ]


class Teacher:
    """The scripted teacher, slowed down and, on ``kill_task``, killing its own process once (a dying actor)."""

    def __init__(
        self,
        seed: int,
        delay_s: float = 0.0,
        kill_marker: str | None = None,
        kill_task: str = "",
        busy_dir: str | None = None,
    ):
        self.inner = ScriptedTeacher(seed=seed, imperfections=WRONG if seed % 2 else RIGHT)
        self.name = self.inner.name
        self.delay_s, self.kill_marker, self.kill_task = delay_s, kill_marker, kill_task
        self.busy_dir = busy_dir

    def act(self, task, observation, history, reflections):
        time.sleep(self.delay_s)
        if self.busy_dir and len(history) == 1:
            import ray

            (Path(self.busy_dir) / ray.util.get_node_ip_address()).write_text(task.id)
        if self.kill_marker and task.id == self.kill_task and len(history) == 1:
            marker = Path(self.kill_marker)
            if not marker.exists():
                marker.write_text(str(os.getpid()))
                os.kill(os.getpid(), signal.SIGKILL)
        return self.inner.act(task, observation, history, reflections)


class Hanging:
    """Decides once, then never again (a model that stops answering)."""

    name = "hanging"

    def __init__(self, seed: int):
        self.inner = ScriptedTeacher(seed=seed, imperfections=RIGHT)

    def act(self, task, observation, history, reflections):
        if history:
            time.sleep(3600)
        return self.inner.act(task, observation, history, reflections)


def unbuildable_judge(server):
    raise ZeroDivisionError("a judge that cannot be built")


def roles(
    delay_s: float = 0.0, kill_marker: str | None = None, kill_task: str = "", busy_dir: str | None = None
) -> Roles:
    return Roles(
        agent=lambda seed: Teacher(seed, delay_s, kill_marker, kill_task, busy_dir),
        judge=lambda server: SandboxJudge(server.session_state),
    )


def on_cluster(settings: dict) -> None:
    """Join the cluster, kill a node once its agent is mid-episode, run every episode; then a run no live node can
    place. Writes ``settings["result"]``."""
    import ray

    ray.init(address=settings["address"], include_dashboard=False, log_to_driver=False)
    deadline = time.monotonic() + 60
    while sum(node["Alive"] for node in ray.nodes()) < settings["nodes"]:
        assert time.monotonic() < deadline, f"the cluster has not {settings['nodes']} live nodes"
        time.sleep(0.2)
    result: dict = {}
    busy = Path(settings["busy_dir"]) / settings["kill_node"][0]

    def kill_the_node() -> None:
        while not busy.exists():
            time.sleep(0.05)
        os.kill(int(Path(settings["kill_node"][1]).read_text()), signal.SIGKILL)
        result["killed_at"] = time.time()

    threading.Thread(target=kill_the_node, daemon=True).start()
    config = RolloutConfig(backend="ray", address=settings["address"], cpus_per_browser=1.0)
    run_rollouts(
        episodes(settings["task_ids"], settings["raw_root"]),
        roles(settings["delay_s"], busy_dir=settings["busy_dir"]),
        config,
        browsers=settings["browsers"],
        sandbox_seed=0,
        journal=Journal(settings["journal"], FINGERPRINT),
        progress=None,
    )
    result["ended_at"] = time.time()
    ((hung,),) = run_rollouts(  # killed past its hard limit, not retried: an env error, its files removed
        episodes(settings["task_ids"][:1], "hung"),
        Roles(agent=Hanging, judge=lambda server: SandboxJudge(server.session_state)),
        config.model_copy(update={"episode_hard_limit_s": 2.0}),
        sandbox_seed=0,
        settings=rollouts.EpisodeSettings(env_retries=0),
        progress=None,
    )
    result["hung"] = {
        "termination": hung.termination,
        "env_errors": hung.metadata["env_errors"],
        "files_left": Path("hung", settings["task_ids"][0]).exists(),
    }
    try:  # no live node has 2 CPUs: the run must stop, saying so
        run_rollouts(
            episodes(settings["task_ids"][:1]),
            roles(),
            config.model_copy(update={"cpus_per_browser": 2.0, "actor_start_timeout_s": 3.0}),
            sandbox_seed=0,
            progress=None,
        )
    except rollouts.RolloutError as err:
        result["unplaceable"] = str(err)
    try:  # a browser actor whose constructor raises fails the run before any episode, with the cause
        run_rollouts(
            episodes(settings["task_ids"][:1]), Roles(Teacher, unbuildable_judge), config, progress=None
        )
    except ray.exceptions.RayActorError as err:
        result["unbuildable"] = str(err)
    Path(settings["result"]).write_text(json.dumps(result))
    ray.shutdown()


def frozen(result: str) -> None:
    """A frozen page and two calm ones on the local Ray; see the module docstring."""
    site = frozen_site.Site()
    started = time.monotonic()
    results = run_rollouts(
        frozen_site.episodes(calm=2),
        frozen_site.roles(),
        LOCAL_RAY,
        browsers=2,
        browser=site.browser(),
        settings=rollouts.EpisodeSettings(env_retries=1),
        progress=None,
    )
    took = time.monotonic() - started
    site.stop()
    deadline = time.monotonic() + 30  # the actors' processes are gone; a killed Chromium takes a moment
    while (left := chromium_processes()) and time.monotonic() < deadline:
        time.sleep(0.2)
    episodes = [
        {"termination": run.termination, "success": run.success, "env_errors": run.metadata.get("env_errors", []),
         "wall_s": run.metadata.get("wall_s")}
        for (run,) in results
    ]  # fmt: skip
    Path(result).write_text(json.dumps({"episodes": episodes, "run_s": took, "chromium_left": left}))


def chromium_processes() -> list[int]:
    """Chromium processes of this PID namespace (its own /proc)."""
    left = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and b"chrom" in (entry / "cmdline").read_bytes().split(b"\0")[0]:
                left.append(int(entry.name))
        except OSError:
            continue
    return left


def main(settings: dict) -> None:
    if "address" in settings:
        return on_cluster(settings)
    if "frozen" in settings:
        return frozen(settings["frozen"])
    specs = episodes(settings["task_ids"])
    run_rollouts(
        specs,
        roles(settings.get("delay_s", 0.0), settings.get("kill_marker"), settings["task_ids"][0]),
        LOCAL_RAY,
        browsers=settings["browsers"],
        sandbox_seed=0,
        journal=Journal(settings["journal"], FINGERPRINT),
        progress=None,
    )


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
