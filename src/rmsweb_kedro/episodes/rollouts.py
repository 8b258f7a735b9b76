"""The one way episodes run: tasks x agent x judge on a backend (browser threads here, or actors on a Ray cluster).

Collection, evaluate's online episodes, mining's online probes, ``live`` and the sandbox ``solve`` command all
call :func:`run_rollouts`. The caller says *what* to run (a list of :class:`EpisodeSpec`, or :class:`Attempts`
chains whose next attempt depends on the last: retries, reflections) and *who* acts and judges (:class:`Roles`,
factories built where the browser lives). This module owns the rest:

- the sandbox server's lifetime (when ``sandbox_seed`` is given), and the :class:`BrowserConfig` pointing at it;
- environment errors, retried apart from task failures: inside an episode (a crashed Chromium, a page that does not
  load: ``episodes.episode.run_episode``) and around it (a Ray actor or node that dies mid-episode, an episode past its
  hard time limit). After ``env_retries`` the episode ends ``termination="env_error"``, ``success=None``, never
  counted as the agent's success or failure;
- the per-episode wall-time limit (:attr:`RolloutConfig.episode_time_limit_s`, judged) and, on both backends, the
  hard limit past which an episode is given up as an environment error (:func:`hard_limit_s`; a frozen page ends
  much sooner, in the browser: ``BrowserConfig.hang_timeout_s``);
- the :class:`Journal`: every finished episode is appended (fsync'd) by the driver as it arrives, so a killed run
  loses only the episodes in flight and a re-run with the same fingerprint resumes;
- progress (a tqdm bar with the outcome tally); a trajectory's table row is :func:`schema.trajectory_row`.

Invariant: each episode key is journaled at most once per fingerprint, and every finished episode is in the result
exactly once, whichever backend ran it and however many workers died on the way.

Backends (``params:rollouts``, conf/base/parameters_rollouts.yml): ``threads`` runs N browser threads in this
process (Playwright's sync API belongs to its thread); ``ray`` runs one actor per browser, each owning its Chromium
and, for sandbox tasks, a sandbox server of its own; results stream back to the driver, which journals them.

Lost Ray nodes. The driver hands an episode only to an actor that has started (its ``ready`` answered), never to
one Ray has yet to place: after a node dies, its episodes go back to the driver's queue and run on the surviving
actors, while a replacement actor waits for a node with spare CPUs and joins once placed (until then the pool is
smaller). This is the simplest design that cannot wait on an unplaceable actor: no placement timeout decides where
an episode goes, and a cluster that regains nodes regains browsers. Only when no started actor is left and none is
placed within ``actor_start_timeout_s`` does the run stop, with an error naming the CPUs it lacks (the journal keeps
what finished; a re-run resumes). An actor is killed for good when its episode is lost (a node cut off from the
cluster may still be running it) and when it runs past its hard limit (``episode_hard_limit_s``, on by default).

Files. The driver makes every per-episode path absolute (``screenshot_dir``, ``relative_to``) before an episode
leaves it: an actor's working folder is its node's, not the project's. A lost try's files are removed before the
episode is queued again (and each try empties its folder first: ``episodes.episode.run_episode``), so the retry's steps
reference only the retry's screenshots.

One module because the rollout engine is one concept: the episode settings, the journal that makes a run
resumable and the two backends (browser threads, Ray actors), which must behave alike, share their retry and
time-limit rules.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import logging
import os
import queue
import shutil
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field

from rmsweb_kedro.agents.base import Agent, Judge, Reflector
from rmsweb_kedro.contracts.schema import ENV_TERMINATIONS, CollectionMode, Task, Trajectory
from rmsweb_kedro.episodes.episode import EpisodeSettings, final_answer, run_episode

logger = logging.getLogger(__name__)

#: What one model call or one browser step may take beyond a wall-time limit checked before it (a step's own
#: deadlines: navigation 15 s, actions 5 s, a frozen page 15 s more; a slow model reply): see :func:`hard_limit_s`.
HANG_GRACE_S = 120.0
#: How long closing the threads backend waits for its browser threads before it leaves them (their Chromium killed).
CLOSE_TIMEOUT_S = 60.0


class RolloutConfig(BaseModel):
    """``params:rollouts`` (conf/base/parameters_rollouts.yml): where episodes run, shared by collect, evaluate,
    mining and live."""

    model_config = ConfigDict(extra="forbid")

    backend: Literal["threads", "ray"] = "threads"
    #: ray: a running cluster's address (``auto``: the one ``ray start`` made on this machine); null starts a
    #: local Ray inside this process (tests, one machine).
    address: str | None = None
    num_cpus: int | None = Field(default=None, ge=1, description="local Ray only: CPUs it may use")
    object_store_mb: int | None = Field(default=None, ge=75, description="local Ray only: object store size")
    cpus_per_browser: float = Field(default=1.0, gt=0, description="ray: CPUs reserved by each browser actor")
    #: Without ``episode_time_limit_s``: an episode (all its tries, judging and reflecting) still running after this
    #: long is given up as an environment error and retried (threads: its browser killed and its thread replaced; ray:
    #: its actor killed). With a time limit the hard limit is derived from it: :func:`hard_limit_s`.
    episode_hard_limit_s: float = Field(default=1800.0, gt=0)
    #: ray: with no started browser actor left, how long to wait for Ray to place one before the run fails naming
    #: the CPUs it lacks (a node may be joining); while other actors run episodes, a pending one just waits.
    actor_start_timeout_s: float = Field(default=300.0, gt=0)
    #: Wall time of one try of an episode from its first page (checked before each decision; ``time_limit``, judged).
    episode_time_limit_s: float | None = Field(default=None, gt=0)
    #: Open web: tries of an episode restarted after the site refused the browser (a captcha or anti-bot page,
    #: HTTP 403/429, a login wall) before it ends ``blocked``, an environment outcome counted apart.
    block_retries: int = Field(default=1, ge=0)


# ---------------------------------------------------------------- what runs


@dataclass
class EpisodeSpec:
    """One episode to run. ``key`` identifies it in the journal (unique in a run); ``seed`` is the agent
    factory's argument; ``screenshot_dir``/``relative_to`` as in ``episodes.episode.run_episode``, relative to the driver's
    working folder (the driver makes them absolute; on a cluster: a filesystem every node mounts at the same
    path); ``reflect``: after a failed attempt the reflector writes a reflection (``metadata["reflection_after"]``)
    that an :class:`Attempts` chain passes to the next attempt."""

    key: str
    task: Task
    max_steps: int
    seed: int = 0
    attempt: int = 1
    mode: CollectionMode = "policy"
    reflections: list[str] = field(default_factory=list)
    trajectory_id: str | None = None
    screenshot_dir: str | None = None
    relative_to: str | None = None
    reflect: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)

    def identity(self) -> dict[str, Any]:
        """The fields a journal entry is found by."""
        return {"key": self.key, "mode": self.mode, "task_id": self.task.id, "attempt": self.attempt}

    def absolute(self) -> EpisodeSpec:
        """This spec with its file paths absolute, resolved by the driver: a Ray actor's working folder is its
        node's."""
        return dataclasses.replace(
            self,
            screenshot_dir=None if self.screenshot_dir is None else os.path.abspath(self.screenshot_dir),
            relative_to=None if self.relative_to is None else os.path.abspath(self.relative_to),
        )


@dataclass
class Attempts:
    """Up to ``budget`` attempts of one task, stopping at the first verified success: ``make(attempt,
    reflections)`` gives attempt k's spec, ``reflections`` being those written after the failed attempts before
    it. A single episode is ``Attempts.of(spec)``."""

    make: Callable[[int, list[str]], EpisodeSpec]
    budget: int = 1

    @classmethod
    def of(cls, spec: EpisodeSpec) -> Attempts:
        return cls(lambda _attempt, _reflections: spec, 1)

    def next(self, finished: list[Trajectory]) -> EpisodeSpec | None:
        if finished and (finished[-1].success or len(finished) >= self.budget):
            return None
        reflections = [t.metadata["reflection_after"] for t in finished if t.metadata.get("reflection_after")]
        return self.make(len(finished) + 1, reflections)


@dataclass
class Roles:
    """Who acts, judges and reflects, as factories called where the browser lives (a thread, or a Ray actor:
    there they must pickle). ``agent(seed)`` is called once per episode; ``judge(server)`` and ``reflector()``
    once per browser (``server``: the :class:`SandboxServer` of sandbox tasks, else None)."""

    agent: Callable[[int], Agent]
    judge: Callable[[Any], Judge]
    reflector: Callable[[], Reflector] | None = None


# ---------------------------------------------------------------- the journal


class Journal:
    """Append-only JSON lines of finished episodes, found by the ``key`` fields of each entry; entries written
    under another ``fingerprint`` (other settings) are ignored, and a torn last line (killed mid-write) is skipped
    on load."""

    def __init__(self, path: str | Path, fingerprint: str, key: tuple[str, ...] = ("key",)):
        self.path = Path(path)
        self.fingerprint = fingerprint
        self.key = key
        self._lock = threading.Lock()

    def key_of(self, entry: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(entry[name] for name in self.key)

    def load(self) -> dict[tuple[Any, ...], dict[str, Any]]:
        entries: dict[tuple[Any, ...], dict[str, Any]] = {}
        if not self.path.exists():
            return entries
        with self.path.open("rb+") as file:  # a line torn by a kill must not swallow the next entry
            if file.seek(0, os.SEEK_END) and (file.seek(-1, os.SEEK_END), file.read(1))[1] != b"\n":
                file.write(b"\n")
        for number, line in enumerate(self.path.read_text(encoding="utf-8").splitlines(), 1):
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                logger.warning(
                    "%s line %d: torn entry (an episode in flight when the run stopped); redone",
                    self.path,
                    number,
                )
                continue
            if entry.get("fingerprint") == self.fingerprint:
                entries[self.key_of(entry)] = entry
        return entries

    def append(self, entry: dict[str, Any]) -> None:
        line = json.dumps({**entry, "fingerprint": self.fingerprint}, ensure_ascii=False) + "\n"
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as file:
                file.write(line)
                file.flush()
                os.fsync(file.fileno())


def hard_limit_s(config: RolloutConfig, settings: EpisodeSettings) -> float:
    """The longest an episode may run on a backend before it is given up as an environment error (both backends).

    Without a time limit: ``episode_hard_limit_s``. With one (``t``, per try, checked before each decision), each
    try may run one decision and one step past it (``HANG_GRACE_S``, ``G``), an episode has up to
    ``env_retries + block_retries + 1`` tries (``episodes.episode.run_episode``), then one judge call and one reflection::

        hard = (env_retries + block_retries + 1) * (t + G) + 2 * G

    e.g. t = 300 s, 2 env retries, 1 block retry: 4 * 420 + 240 = 1,920 s."""
    if settings.time_limit_s is None:
        return config.episode_hard_limit_s
    block_retries = config.block_retries if settings.block_retries is None else settings.block_retries
    tries = settings.env_retries + block_retries + 1
    return tries * (settings.time_limit_s + HANG_GRACE_S) + 2 * HANG_GRACE_S


def fingerprint(settings: dict[str, Any]) -> str:
    """A short hash of what decides an episode's outcome: journal entries with another one are not reused."""
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:12]


# ---------------------------------------------------------------- one browser


class EpisodeWorker:
    """One browser running episodes one at a time, with the sandbox server of sandbox tasks (``server``, shared
    by the threads of this process; ``sandbox_seed`` alone: its own, as each Ray actor starts). The BrowserEnv is
    created here, so construct and use a worker in one thread."""

    def __init__(
        self,
        roles: Roles,
        browser: Any,
        settings: EpisodeSettings,
        sandbox_seed: int | None = None,
        server: Any = None,
    ):
        from rmsweb_kedro.web.browser import BrowserConfig, BrowserEnv

        self.roles, self.settings = roles, settings
        self._own_server = server is None and sandbox_seed is not None
        if self._own_server:
            from rmsweb_kedro.web.sandbox import SandboxServer

            server = SandboxServer(port=0, seed=sandbox_seed).start()
        self.server = server
        config = BrowserConfig.model_validate(browser or {})
        if server is not None:
            config = config.model_copy(update={"host_resolver_rules": server.host_resolver_rules})
        self.env = BrowserEnv(config)
        self.judge = roles.judge(server)
        self.reflector = roles.reflector() if roles.reflector is not None else None

    def ready(self) -> int:
        """This worker's process id (a Ray actor answers once it is constructed)."""
        return os.getpid()

    def run(self, spec: EpisodeSpec) -> Trajectory:
        started = time.perf_counter()
        trajectory = run_episode(
            self.env,
            spec.task,
            self.roles.agent(spec.seed),
            self.judge,
            spec.max_steps,
            spec.reflections,
            attempt=spec.attempt,
            mode=spec.mode,
            trajectory_id=spec.trajectory_id,
            screenshot_dir=spec.screenshot_dir,
            relative_to=spec.relative_to,
            metadata=spec.metadata,
            settings=self.settings,
        )
        trajectory.metadata["wall_s"] = time.perf_counter() - started
        if spec.reflect and trajectory.success is False and self.reflector is not None:
            text, usage = self.reflector.reflect(
                spec.task, trajectory.steps, trajectory.verdict, final_answer(trajectory.steps)
            )
            trajectory.metadata["reflection_after"] = text
            trajectory.metadata["reflector"] = getattr(self.reflector, "name", type(self.reflector).__name__)
            trajectory.usage += usage
            trajectory.cost_usd += getattr(self.reflector, "cost_of", lambda _usage: 0.0)(usage)
        return trajectory

    def close(self) -> None:
        self.env.close()
        if self._own_server:
            self.server.stop()


# ---------------------------------------------------------------- backends


@dataclass
class _Lost:
    """The worker running an episode died or hung: an environment error of that episode."""

    reason: str


class _ThreadPool:
    """N browser threads in this process sharing one sandbox server. An episode past the hard limit
    (:func:`hard_limit_s`) is given up: its browser is killed, its thread left to end on its own (a thread cannot be
    killed; its late result is dropped) and replaced by a new one, and the episode comes back as :class:`_Lost`."""

    def __init__(
        self,
        n: int,
        roles: Roles,
        browser: Any,
        settings: EpisodeSettings,
        sandbox_seed: int | None,
        config: RolloutConfig,
    ):
        self._server = None
        if sandbox_seed is not None:
            from rmsweb_kedro.web.sandbox import SandboxServer

            self._server = SandboxServer(port=0, seed=sandbox_seed).start()
        self._jobs: queue.Queue[tuple[int, EpisodeSpec] | None] = queue.Queue()
        self._results: queue.Queue[tuple[int, Any]] = queue.Queue()
        self._hard_limit = hard_limit_s(config, settings)
        # ticket -> (since when, by which worker, on which thread)
        self._running: dict[int, tuple[float, EpisodeWorker, threading.Thread]] = {}
        # tickets given up: their threads end after them, their results are dropped; those threads are left
        self._abandoned: set[int] = set()
        self._left: set[threading.Thread] = set()
        # an episode's end and its giving up are one step each, or a worker finishing in between would go on
        # beside the thread started in its place
        self._lock = threading.Lock()
        self.free = n
        self._threads: list[threading.Thread] = []
        self._roles, self._browser, self._settings = roles, browser, settings
        for _ in range(n):
            self._spawn()

    def _spawn(self) -> None:
        thread = threading.Thread(
            target=self._serve,
            args=(self._roles, self._browser, self._settings),
            name=f"browser-env-{len(self._threads)}",
            daemon=True,
        )
        self._threads.append(thread)
        thread.start()

    def _serve(self, roles: Roles, browser: Any, settings: EpisodeSettings) -> None:
        worker = None
        try:
            worker = EpisodeWorker(roles, browser, settings, server=self._server)
            while (job := self._jobs.get()) is not None:
                ticket, spec = job
                self._running[ticket] = (time.monotonic(), worker, threading.current_thread())
                try:
                    outcome: Any = worker.run(spec)
                except Exception as err:  # a bug in a role or the caller: recorded, the other episodes go on
                    logger.exception("episode %s failed", spec.key)
                    outcome = err
                with self._lock:
                    self._running.pop(ticket, None)
                    abandoned = ticket in self._abandoned
                self._results.put((ticket, outcome))
                if abandoned:  # given up by the driver, which started a thread in its place
                    break
        except Exception as err:  # the worker could not be built: its jobs fail, reported by the driver
            logger.exception("a browser worker could not start")
            while (job := self._jobs.get()) is not None:
                self._results.put((job[0], err))
        finally:
            if worker is not None:
                worker.close()

    def submit(self, ticket: int, spec: EpisodeSpec) -> None:
        self.free -= 1
        self._jobs.put((ticket, spec))

    def next_result(self) -> tuple[int, Any]:
        """The next finished episode, or one given up past the hard limit (as :class:`_Lost`)."""
        while True:
            now = time.monotonic()
            for ticket, (since, worker, thread) in list(self._running.items()):
                if now - since <= self._hard_limit:
                    continue
                with self._lock:
                    if self._running.pop(ticket, None) is None:  # it ended meanwhile: its result is queued
                        continue
                    self._abandoned.add(ticket)
                    self._left.add(thread)
                    logger.warning(
                        "an episode ran past its hard limit of %.0f s; giving it up", self._hard_limit
                    )
                    worker.env.kill()
                    self._spawn()
                    self.free += 1
                    return ticket, _Lost(f"the episode ran past its hard limit of {self._hard_limit:.0f} s")
            try:
                ticket, outcome = self._results.get(timeout=1.0)
            except queue.Empty:
                continue
            if ticket in self._abandoned:  # a late result of an episode already given up
                continue
            self.free += 1
            return ticket, outcome

    def close(self) -> None:
        """Stop the threads; one still busy after ``CLOSE_TIMEOUT_S`` (the driver stopped mid-run) is left, its
        browser killed."""
        for _ in self._threads:
            self._jobs.put(None)
        deadline = time.monotonic() + CLOSE_TIMEOUT_S
        for thread in self._threads:
            if thread not in self._left:
                thread.join(timeout=max(0.0, deadline - time.monotonic()))
        busy = [worker for _, worker, thread in list(self._running.values()) if thread.is_alive()]
        for worker in busy:
            worker.env.kill()
        if busy:
            logger.warning(
                "%d browser thread(s) still busy after %.0f s were left", len(busy), CLOSE_TIMEOUT_S
            )
        if self._server is not None:
            self._server.stop()


class _RayPool:
    """One Ray actor per browser (each with its Chromium and, for sandbox tasks, its own sandbox server). Actors
    take episodes once started; one lost mid-episode is killed and replaced, its episode back as :class:`_Lost`
    (module docstring: lost Ray nodes)."""

    def __init__(
        self,
        n: int,
        roles: Roles,
        browser: Any,
        settings: EpisodeSettings,
        sandbox_seed: int | None,
        config: RolloutConfig,
    ):
        import ray

        self._ray = ray
        self._owns_ray = not ray.is_initialized()
        if self._owns_ray:
            local = config.address is None
            ray.init(
                address=config.address,
                num_cpus=config.num_cpus if local else None,
                object_store_memory=config.object_store_mb * 2**20
                if local and config.object_store_mb
                else None,
                include_dashboard=False,
                log_to_driver=True,
            )
        self._config = config
        self._hard_limit = hard_limit_s(config, settings)
        actor = ray.remote(EpisodeWorker).options(num_cpus=config.cpus_per_browser, max_restarts=0)
        shared = [ray.put(value) for value in (roles, browser, settings)]  # serialised once for every actor
        self._make = lambda: actor.remote(*shared, sandbox_seed)
        self._free: deque[Any] = deque()
        self._starting: dict[Any, tuple[Any, float]] = {}  # ready() ref -> (actor, when it was asked for)
        self._in_flight: dict[Any, tuple[Any, int, float]] = {}
        for _ in range(n):
            self._start()
        try:  # a role or browser that cannot be built fails here, before any episode
            while not self._free:
                self._check_capacity()
                ready, _ = ray.wait(list(self._starting), num_returns=1, timeout=1.0)
                for ref in ready:
                    self._started(ref)
        except BaseException:
            self.close()
            raise

    @property
    def free(self) -> int:
        return len(self._free)

    def _start(self) -> None:
        worker = self._make()
        self._starting[worker.ready.remote()] = (worker, time.monotonic())

    def _started(self, ref: Any) -> None:
        """An actor answered ``ready``: it takes episodes; one whose node died while it started is dropped."""
        ray = self._ray
        worker, _ = self._starting.pop(ref)
        try:
            ray.get(ref)
        except ray.exceptions.RayActorError as err:
            ray.kill(worker)
            if err.actor_init_failed:  # its constructor raised: a role or browser that cannot be built
                raise
            logger.warning(
                "a browser actor died while starting (%s); the pool is one smaller", type(err).__name__
            )
            return
        self._free.append(worker)

    def _lose(self, worker: Any) -> None:
        """Kill a lost or hung actor for good (it may still be running on a node cut off from the cluster) and ask
        for a replacement, which takes episodes once Ray places it."""
        try:
            self._ray.kill(worker, no_restart=True)
        except Exception as err:  # already gone with its node
            logger.debug("killing a lost browser actor: %s", err)
        self._start()

    def _check_capacity(self) -> None:
        """Fail, naming what is missing, when no started actor is left and none was placed in time."""
        if self._free or self._in_flight:
            return
        now = time.monotonic()
        if self._starting and any(
            now - since < self._config.actor_start_timeout_s for _, since in self._starting.values()
        ):
            return
        ray = self._ray
        alive = sum(1 for node in ray.nodes() if node.get("Alive"))
        waited = (
            f"Ray placed none in {self._config.actor_start_timeout_s:.0f} s (rollouts.actor_start_timeout_s)"
            if self._starting
            else "the last ones died starting"
        )
        raise RolloutError(
            f"no browser actor is left to run episodes and {waited}: each needs "
            f"{self._config.cpus_per_browser:g} CPU (rollouts.cpus_per_browser); the cluster's {alive} live "
            f"node(s) have {ray.available_resources().get('CPU', 0.0):g} of "
            f"{ray.cluster_resources().get('CPU', 0.0):g} CPU free. Add a node (README 'Episodes on a Ray "
            "cluster') or lower rollouts.cpus_per_browser, then re-run: the journal keeps the finished episodes."
        )

    def next_result(self) -> tuple[int, Any] | None:
        """The next finished episode as (ticket, outcome), or None when an actor has started and takes episodes."""
        ray = self._ray
        while True:
            self._check_capacity()
            # checked every time: on a busy cluster some result is always ready
            for ref, (actor, ticket, started) in list(self._in_flight.items()):
                if time.monotonic() - started > self._hard_limit:
                    del self._in_flight[ref]
                    self._lose(actor)
                    return ticket, _Lost(f"the episode ran past its hard limit of {self._hard_limit:.0f} s")
            ready, _ = ray.wait([*self._in_flight, *self._starting], num_returns=1, timeout=1.0)
            if ready and ready[0] in self._starting:
                self._started(ready[0])
                if self._free:
                    return None
                continue
            if ready:
                actor, ticket, _ = self._in_flight.pop(ready[0])
                try:
                    outcome = ray.get(ready[0])
                except ray.exceptions.RayTaskError as err:  # the episode's own code raised
                    self._free.append(actor)
                    return ticket, err.as_instanceof_cause()
                except ray.exceptions.RayError as err:  # the actor, its process or its node died
                    logger.warning("browser actor lost mid-episode (%s); replacing it", type(err).__name__)
                    self._lose(actor)
                    return ticket, _Lost(f"the browser actor died mid-episode ({type(err).__name__})")
                self._free.append(actor)
                return ticket, outcome

    def submit(self, ticket: int, spec: EpisodeSpec) -> None:
        actor = self._free.popleft()
        self._in_flight[actor.run.remote(spec)] = (actor, ticket, time.monotonic())

    def close(self) -> None:
        ray = self._ray
        actors = list(self._free) + [actor for actor, _, _ in self._in_flight.values()]
        try:  # an actor never placed cannot answer: it is only killed
            ray.get([actor.close.remote() for actor in actors], timeout=60)
        except Exception as err:  # an actor that cannot close cleanly is killed below anyway
            logger.debug("closing browser actors: %s", err)
        for actor in actors + [actor for actor, _ in self._starting.values()]:
            ray.kill(actor)
        if self._owns_ray:
            ray.shutdown()


# ---------------------------------------------------------------- the driver


class RolloutError(RuntimeError):
    """Episodes whose own code raised (a bug in a role, not an environment error); the others were journaled."""


def run_rollouts(
    items: Sequence[EpisodeSpec | Attempts],
    roles: Roles,
    config: RolloutConfig | dict[str, Any] | None = None,
    *,
    browsers: int = 1,
    browser: Any = None,
    sandbox_seed: int | None = None,
    journal: Journal | None = None,
    settings: EpisodeSettings | None = None,
    progress: str | None = "episodes",
) -> list[list[Trajectory]]:
    """Run every item's episodes on ``browsers`` browsers; returns, per item, its trajectories in attempt order
    (journaled ones included, so a resumed run returns what a fresh one would).

    ``browser``: BrowserConfig (or its overrides as a dict); ``sandbox_seed``: the world seed sandbox tasks are
    served with (the server starts only when an episode to run needs it: :func:`_needs_sandbox`). ``progress``: the
    bar's label (None: no bar). Raises :class:`RolloutError` after the
    run when an episode's code raised (the other episodes finished and were journaled)."""
    from tqdm.auto import tqdm

    config = RolloutConfig.model_validate(config or {})
    settings = settings or EpisodeSettings()
    if config.episode_time_limit_s is not None and settings.time_limit_s is None:
        settings = dataclasses.replace(settings, time_limit_s=config.episode_time_limit_s)
    if settings.block_retries is None:
        settings = dataclasses.replace(settings, block_retries=config.block_retries)
    chains = [item if isinstance(item, Attempts) else Attempts.of(item) for item in items]
    done = journal.load() if journal is not None else {}
    unit = "task" if any(chain.budget > 1 for chain in chains) else "episode"
    bar = tqdm(total=len(chains), desc=progress, unit=unit, disable=progress is None)
    run = _RunState(chains, journal, done, bar)
    for index in range(len(chains)):
        run.advance(index)
    if run.resumed:
        logger.info("%s: %d episodes already in %s", progress or "rollouts", run.resumed, journal.path)
    if run.waiting:
        n = max(1, min(browsers, len(run.waiting)))
        if not any(_needs_sandbox(spec.task) for _, spec, _ in run.waiting):
            sandbox_seed = None  # no task left that the sandbox serves: no sandbox server
        backend: Any = _RayPool if config.backend == "ray" else _ThreadPool
        pool = backend(n, roles, browser, settings, sandbox_seed, config)
        try:
            _drive(pool, run, settings.env_retries)
        finally:
            pool.close()
            bar.close()
    else:
        bar.close()
    if run.failures:
        spec, error = run.failures[0]
        raise RolloutError(
            f"{len(run.failures)} episode(s) raised instead of finishing; first: {spec.key}: "
            f"{type(error).__name__}: {error}"
        ) from error
    return run.results


@dataclass
class _RunState:
    """What the driver keeps of a run: each item's chain of attempts and its finished trajectories, the journal's
    entries, the episodes waiting for a browser (with the reasons their earlier tries were lost), the episodes whose
    code raised, and the progress bar with its outcome tally."""

    chains: list[Attempts]
    journal: Journal | None
    done: dict[tuple[Any, ...], dict[str, Any]]  # the journal's entries when the run started
    bar: Any
    results: list[list[Trajectory]] = field(init=False)
    waiting: deque[tuple[int, EpisodeSpec, list[str]]] = field(default_factory=deque)
    tally: Counter[str] = field(default_factory=Counter)
    failures: list[tuple[EpisodeSpec, BaseException]] = field(default_factory=list)
    resumed: int = 0

    def __post_init__(self) -> None:
        self.results = [[] for _ in self.chains]

    def advance(self, index: int) -> None:
        """Queue chain ``index``'s next episode, taking the ones the journal holds as finished; a chain with no
        next episode is done (the bar moves)."""
        while (spec := self.chains[index].next(self.results[index])) is not None:
            entry = self.done.get(self.journal.key_of(spec.identity())) if self.journal is not None else None
            if entry is None:
                self.waiting.append((index, spec.absolute(), []))
                return
            self.results[index].append(Trajectory.model_validate(entry["trajectory"]))
            self.resumed += 1
        self.bar.update(1)

    def finish(self, index: int, spec: EpisodeSpec, outcome: Trajectory, lost: list[str]) -> None:
        """Journal a finished episode (with the reasons its earlier tries were lost), keep it as the journal reads
        it back, and queue its chain's next episode."""
        if lost:
            outcome.metadata["env_errors"] = lost + outcome.metadata.get("env_errors", [])
        record = {**spec.identity(), "success": outcome.success, "termination": outcome.termination,
                  "trajectory": outcome.model_dump(mode="json")}  # fmt: skip
        if self.journal is not None:
            self.journal.append(record)
        # the journal's JSON round trip, so a fresh run returns exactly what a resumed one reads back
        self.results[index].append(Trajectory.model_validate(record["trajectory"]))
        self.tally[_outcome(outcome)] += 1
        self.bar.set_postfix(self.tally)
        self.advance(index)


def _drive(pool: Any, run: _RunState, env_retries: int) -> None:
    """Hand the waiting episodes to the pool's free browsers until none waits or runs. An episode whose worker was
    lost goes back to the front of the queue (its files removed) until it has been lost more than ``env_retries``
    times, then ends ``env_error``; one whose code raised is kept in ``run.failures``."""
    tickets: dict[int, tuple[int, EpisodeSpec, list[str]]] = {}
    numbers = itertools.count()
    while run.waiting or tickets:
        while run.waiting and pool.free:
            ticket = next(numbers)
            tickets[ticket] = run.waiting.popleft()
            pool.submit(ticket, tickets[ticket][1])
        if (finished := pool.next_result()) is None:  # an actor started: it takes the next episode
            continue
        ticket, outcome = finished
        index, spec, lost = tickets.pop(ticket)
        if isinstance(outcome, _Lost):
            if spec.screenshot_dir is not None:  # the dead try's files: the retry writes its own
                shutil.rmtree(spec.screenshot_dir, ignore_errors=True)
            lost = [*lost, outcome.reason]
            if len(lost) <= env_retries:
                run.waiting.appendleft((index, spec, lost))
                continue
            outcome, lost = _env_error(spec, lost), []  # the record lists its errors once
        elif isinstance(outcome, BaseException):
            run.failures.append((spec, outcome))
            run.bar.update(1)
            continue
        run.finish(index, spec, outcome, lost)


def _needs_sandbox(task: Task) -> bool:
    """A sandbox task, or a task whose start page is on the sandbox's hosts (its sites reached by URL as unknown
    websites: no checker, an LLM judge): only the sandbox server answers there."""
    from rmsweb_kedro.web.sandbox.server import DOMAIN

    host = (urlsplit(task.start_url).hostname or "").lower()
    return task.source == "sandbox" or host == DOMAIN or host.endswith("." + DOMAIN)


def _env_error(spec: EpisodeSpec, errors: list[str]) -> Trajectory:
    """The record of an episode whose worker kept dying: no steps, no verdict."""
    return Trajectory(
        id=spec.trajectory_id or f"{spec.task.id}__{spec.mode}__a{spec.attempt}",
        task_id=spec.task.id,
        site=spec.task.site,
        instruction=spec.task.instruction,
        attempt=spec.attempt,
        mode=spec.mode,
        reflections=list(spec.reflections),
        steps=[],
        termination="env_error",
        metadata={**spec.metadata, "env_errors": errors},
    )


def _outcome(trajectory: Trajectory) -> str:
    if trajectory.termination in (*ENV_TERMINATIONS, "critical_point"):
        return trajectory.termination
    return "success" if trajectory.success else "failure"
