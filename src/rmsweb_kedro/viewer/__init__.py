"""The episode viewer: a read-only web app over a run's outputs (collection attempts, mined states, Salvage-DS
updates, evaluation episodes side by side), started by ``kedro viewer`` or ``python -m rmsweb_kedro.viewer``
(docs/viewer.md)."""

from rmsweb_kedro.viewer.server import serve

__all__ = ["serve"]
