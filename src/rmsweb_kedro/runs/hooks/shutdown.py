"""The run's shutdown on a signal: :class:`ShutdownHooks`."""

from __future__ import annotations

from typing import Any

from kedro.framework.hooks import hook_impl

from rmsweb_kedro.models import processes


class ShutdownHooks:
    """For the length of a run, SIGTERM and SIGINT stop the servers and browsers the run started, then end it
    through its ``finally`` blocks (:func:`processes.handle_signals`): a scheduler's SIGTERM to ``kedro run``
    leaves no vLLM server holding a GPU."""

    def __init__(self) -> None:
        self._previous: dict[int, object] | None = None

    @hook_impl
    def before_pipeline_run(self, run_params: dict[str, Any], pipeline, catalog) -> None:
        previous = processes.handle_signals()
        if (
            previous is not None
        ):  # a run off the main thread installs nothing: keep what the main thread's saved
            self._previous = previous

    @hook_impl
    def after_pipeline_run(self, run_params: dict[str, Any], pipeline, catalog) -> None:
        processes.restore_signals(self._previous)
        self._previous = None

    @hook_impl
    def on_pipeline_error(self, error: Exception, run_params: dict[str, Any], pipeline, catalog) -> None:
        processes.restore_signals(self._previous)
        self._previous = None
