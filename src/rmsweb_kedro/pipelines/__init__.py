"""The project's pipelines, one package each (``pipeline.py``: wiring; ``nodes.py``: small functions over library
modules). No package imports another; ``pipeline_registry.py`` composes them. What every ``pipeline.py`` may share
is wiring, and it lives here."""

from collections.abc import Callable
from functools import partial, update_wrapper
from typing import Any


def bind(func: Callable[..., Any], **bound: Any) -> Callable[..., Any]:
    """``func`` with ``bound`` keyword arguments fixed (one node function serving several nodes: a model label, a
    variant), keeping its name for Kedro's logs."""
    return update_wrapper(partial(func, **bound), func)
