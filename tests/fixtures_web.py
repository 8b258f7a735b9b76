"""Shared web fixtures (sandbox server, task suite, browser env); owned by the sandbox area.

``sandbox_server``: a running SandboxServer for the session (stops itself). ``sandbox_task_list``: the default suite.
``browser_config``: a BrowserConfig pointing ``*.sandbox.test`` at that server. ``browser_env``: ONE BrowserEnv
for the session (call ``reset(task)`` per episode). ``make_browser_env``: a factory for extra envs, closed after
the test (create and use them in one thread). ``OnItsThread``: a BrowserEnv whose every call runs on one worker
thread (open-web tests beside the module's shared env).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from rmsweb_kedro.contracts.schema import Task
from rmsweb_kedro.web.browser import BrowserConfig, BrowserEnv
from rmsweb_kedro.web.sandbox import SandboxParams, SandboxServer, generate_tasks


def chromium_available() -> bool:
    try:
        BrowserConfig().executable_path()
        return True
    except FileNotFoundError:
        return shutil.which("chromium") is not None


@pytest.fixture(scope="session")
def sandbox_server() -> Iterator[SandboxServer]:
    with SandboxServer(port=0, seed=0) as server:
        yield server


@pytest.fixture(scope="session")
def sandbox_task_list() -> list[Task]:
    return generate_tasks(SandboxParams())


@pytest.fixture(scope="session")
def browser_config(sandbox_server: SandboxServer) -> BrowserConfig:
    return BrowserConfig(host_resolver_rules=sandbox_server.host_resolver_rules)


# One Chromium a module, not a session: a sync Playwright left running in the main thread makes every later
# `sync_playwright()` there fail ("using Playwright Sync API inside the asyncio loop"), as the proposer and the
# viewer's tests start their own.
@pytest.fixture(scope="module")
def browser_env(browser_config: BrowserConfig) -> Iterator[BrowserEnv]:
    if not chromium_available():
        pytest.skip("Chromium is not installed (set RMSWEB_CHROMIUM)")
    with BrowserEnv(browser_config) as env:
        yield env


@pytest.fixture
def make_browser_env(browser_config: BrowserConfig) -> Iterator[Callable[..., BrowserEnv]]:
    if not chromium_available():
        pytest.skip("Chromium is not installed (set RMSWEB_CHROMIUM)")
    made: list[BrowserEnv] = []

    def make(**overrides: object) -> BrowserEnv:
        env = BrowserEnv(browser_config.model_copy(update=overrides))
        made.append(env)
        return env

    yield make
    for env in made:
        env.close()


@pytest.fixture
def screenshot_dir(tmp_path: Path) -> Path:
    return tmp_path / "shots"


class OnItsThread:
    """A BrowserEnv whose every call runs on the one thread that owns it: Playwright's sync API belongs to the thread
    that started it, and the suite's shared env (tests/fixtures_web.py) may hold the main thread's."""

    def __init__(self, env: BrowserEnv, pool: ThreadPoolExecutor):
        self._env, self._pool = env, pool

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._env, name)
        if not callable(value):
            return value
        return lambda *args, **kwargs: self._pool.submit(value, *args, **kwargs).result()
