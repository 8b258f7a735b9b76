"""``processes``: stopping a registered process group whole, and what a signalled run started, on real processes
(``sh`` and ``sleep``; each test stops what it started)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil

import rmsweb_kedro
from rmsweb_kedro.models import processes


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_for_file(path: Path, timeout_s: float = 30) -> str:
    deadline = time.monotonic() + timeout_s
    while not (path.exists() and path.read_text().strip()):
        assert time.monotonic() < deadline, f"{path} was not written"
        time.sleep(0.05)
    return path.read_text()


def test_a_stopped_group_leaves_no_member_not_even_one_that_ignores_sigterm(tmp_path):
    """The leader exits at SIGTERM; a member that ignores SIGTERM outlives it and is killed (SIGKILL) after the
    grace; the group is unregistered."""
    pids = tmp_path / "pids"
    # the member writes its pid once it ignores SIGTERM
    stubborn = (
        "import os, signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(300)"
    )
    leader = subprocess.Popen(
        ["sh", "-c", f'"{sys.executable}" -c "{stubborn}" {pids} & wait'], start_new_session=True
    )
    member = int(wait_for_file(pids))
    processes.register(leader, "a test group")
    try:
        assert "a test group" in processes.registered() and alive(member)
        started = time.monotonic()
        processes.stop_group(leader, grace_s=2.0)
        assert not alive(member) and leader.poll() is not None
        assert time.monotonic() - started < 30
        assert "a test group" not in processes.registered()
    finally:
        if alive(member):
            os.kill(member, signal.SIGKILL)


SCRIPT = textwrap.dedent(
    """
    import subprocess, sys
    from rmsweb_kedro.models import processes

    processes.handle_signals()
    server = subprocess.Popen(["sleep", "300"], start_new_session=True)
    processes.register(server, "a server")
    open(sys.argv[1], "w").write(str(server.pid))
    try:
        # a child whose own child is in this process's group: subprocess.run kills the child (sh) on the way out,
        # and the grandchild (sleep) is left without a parent here
        subprocess.run(["sh", "-c", "sleep 300 & echo $! > " + sys.argv[2] + "; wait"])
    finally:
        open(sys.argv[3], "w").write("finally ran")
    """
)


def test_a_signalled_process_stops_its_servers_and_the_children_its_children_left(tmp_path):
    """SIGTERM to a process with a registered server and a child of a child: the server is stopped, the
    ``finally`` runs, the exit code is 143, and the grandchild, parentless once ``subprocess.run`` killed its
    parent, is stopped at exit too."""
    server_pid, grandchild_pid, finally_ran = (
        tmp_path / "server",
        tmp_path / "grandchild",
        tmp_path / "finally",
    )
    env = os.environ | {"PYTHONPATH": str(Path(rmsweb_kedro.__file__).parents[1])}
    run = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(server_pid), str(grandchild_pid), str(finally_ran)], env=env
    )
    server, grandchild = int(wait_for_file(server_pid)), int(wait_for_file(grandchild_pid))
    try:
        assert alive(server) and alive(grandchild)
        run.send_signal(signal.SIGTERM)
        assert run.wait(timeout=60) == 128 + signal.SIGTERM
        assert finally_ran.read_text() == "finally ran"
        assert not alive(server)
        deadline = time.monotonic() + 10
        while alive(grandchild) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(grandchild)
    finally:
        for pid in (server, grandchild):
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        if run.poll() is None:
            run.kill()
