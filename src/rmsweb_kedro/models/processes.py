"""The processes a run starts outside itself, and how a signal to the run stops them.

A managed vLLM server runs in a process group of its own (``serving.VLLMServer``: stopping the group stops the engine
processes it forks, and a Ctrl-C at the terminal reaches kedro alone). Stopped only by ``finally`` blocks, a SIGTERM
to ``kedro run`` (a scheduler's) would end kedro at once and leave the server holding its GPU. So:

- every started group is registered here (:func:`register`) until it is stopped (:func:`stop_group`);
- for a run, :func:`handle_signals` (installed by ``runs.hooks.ShutdownHooks``) makes SIGTERM and SIGINT stop every
  registered group and then raise in the main thread (``SystemExit(128 + signum)``; SIGINT: ``KeyboardInterrupt``,
  as Python's own handler), so the ``finally`` blocks that close browsers and write logs run; a second signal
  kills what is left at once;
- at exit (any exit), :func:`stop_all` stops what is still registered; after a signal, also every process the run
  started that is still alive (:func:`stop_descendants`: a browser, its Playwright driver, an ``accelerate launch``).
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import subprocess
import threading
import time

logger = logging.getLogger(__name__)

#: How long a stopped group gets between SIGTERM and SIGKILL (vLLM on the CPU exits in ~1-3 s).
GRACE_S = 30.0

_lock = threading.RLock()  # re-entrant: a signal handler may stop groups while the main thread registers one
_groups: dict[int, tuple[subprocess.Popen, str]] = {}  # group id (its leader's pid) -> (leader, what it is)
_signalled: list[
    tuple[int, float]
] = []  # the signals received by this run, in order, with their monotonic time
#: A signal this long after the first is a first one again: a run ended by a signal skips Kedro's after-run hooks
#: (KeyboardInterrupt and SystemExit are no Exception), so its handler stays installed in a notebook's kernel, and
#: the next Ctrl-C there must interrupt, not kill the kernel.
SECOND_SIGNAL_WINDOW_S = 60.0
#: the run's processes when it was signalled: a child killed on the way out (subprocess.run kills its child on any
#: exception, e.g. ``accelerate launch``) leaves its own children without a parent in this process's tree
_at_signal: list = []


def register(process: subprocess.Popen, what: str) -> None:
    """Remember ``process``, the leader of a process group of its own (``start_new_session=True``), until
    :func:`stop_group`; ``what`` names it in logs."""
    with _lock:
        _groups[process.pid] = (process, what)


def registered() -> list[str]:
    """What is registered now, for logs and tests."""
    with _lock:
        return [what for _, what in _groups.values()]


def _group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs (a zombie, dead but not yet reaped, does not count)."""
    import psutil

    for process in psutil.process_iter(["status"]):
        try:
            if process.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(process.pid) == pgid:
                return True
        except (ProcessLookupError, psutil.Error):
            continue
    return False


def _wait_group(pgid: int, timeout_s: float) -> bool:
    """Wait until no process of group ``pgid`` runs; whether none does."""
    deadline = time.monotonic() + timeout_s
    while _group_alive(pgid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


def stop_group(process: subprocess.Popen, grace_s: float = GRACE_S) -> None:
    """Stop the group ``process`` leads: SIGTERM to every member, SIGKILL after ``grace_s`` (or when the leader is
    gone and members remain: an engine process left behind), the leader reaped; then forget it."""
    pgid = process.pid
    try:
        if process.poll() is None:
            os.killpg(pgid, signal.SIGTERM)
            try:
                process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                os.killpg(pgid, signal.SIGKILL)
                process.wait(timeout=30)
        # the leader is reaped: its group id names only members that outlived it
        if not _wait_group(pgid, min(grace_s, 5.0)):
            os.killpg(pgid, signal.SIGKILL)
            _wait_group(pgid, 5.0)
    except ProcessLookupError:
        pass
    finally:
        with _lock:
            _groups.pop(pgid, None)


def stop_all(grace_s: float = GRACE_S) -> list[str]:
    """Stop every registered group (those still running are named in the log); returns what was stopped."""
    with _lock:
        groups = list(_groups.values())
    for process, what in groups:
        if process.poll() is None:
            logger.warning("stopping %s (process group %d)", what, process.pid)
        stop_group(process, grace_s)
    return [what for _, what in groups]


def descendants() -> list:
    """The processes this one started that still run, children of children included (``psutil.Process``)."""
    import psutil

    try:
        return psutil.Process().children(recursive=True)
    except psutil.Error:
        return []


def stop_descendants(grace_s: float = 5.0, also: list | None = None) -> int:
    """SIGTERM, then after ``grace_s`` SIGKILL, every process this one started that still runs (a group of its own
    too) and those of ``also`` (earlier :func:`descendants`, which may have lost their parent since); returns how
    many there were."""
    import psutil

    children = list({child.pid: child for child in [*(also or []), *descendants()]}.values())
    for child in children:
        try:
            child.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(
        children, timeout=grace_s
    )  # a process that ended since listing counts as gone
    for child in alive:
        try:
            child.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=5)
    return len(children)


def _on_signal(signum: int, frame) -> None:
    name = signal.Signals(signum).name
    now = time.monotonic()
    if _signalled and now - _signalled[0][1] > SECOND_SIGNAL_WINDOW_S:
        _signalled.clear()
        _at_signal.clear()
    _signalled.append((signum, now))
    if len(_signalled) > 1:  # asked twice while the first is being handled: no more waiting
        logger.warning("%s again: killing what the run started", name)
        stop_all(grace_s=0.0)
        stop_descendants(grace_s=0.0, also=_at_signal)
        os._exit(128 + signum)
    logger.warning("%s: stopping the servers and browsers this run started", name)
    _at_signal.extend(descendants())
    # servers first, so that requests in flight to them fail now instead of at their timeout
    stop_all()
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise SystemExit(128 + signum)


def handle_signals() -> dict[int, object] | None:
    """Install the run's SIGTERM and SIGINT handlers (main thread only: elsewhere None, nothing installed); returns
    the previous handlers for :func:`restore_signals`."""
    if threading.current_thread() is not threading.main_thread():
        return None
    _signalled.clear()
    _at_signal.clear()
    return {signum: signal.signal(signum, _on_signal) for signum in (signal.SIGTERM, signal.SIGINT)}


def restore_signals(previous: dict[int, object] | None) -> None:
    """Put back the handlers :func:`handle_signals` replaced."""
    if previous is None or threading.current_thread() is not threading.main_thread():
        return
    for signum, handler in previous.items():
        if handler is not None:  # None: installed from C, which signal.signal cannot put back
            signal.signal(signum, handler)


def _at_exit() -> None:
    stop_all()
    if _signalled:
        stopped = stop_descendants(also=_at_signal)
        if stopped:
            logger.warning("stopped %d processes the run had started", stopped)


atexit.register(_at_exit)
