"""The sandbox: seeded local websites on a real HTTP server, the task suite, checkers and reference solutions.

One package per site under ``sites/`` (data, route table and pages, task templates, checker collections), over a
small core: server, registry, world, pages, steps, tasks, checkers, reference. See docs/sandbox.md. Heavy imports
stay out: this package needs only the standard library, pydantic and polars.
"""

from rmsweb_kedro.web.sandbox.checkers import JUDGE_NAME, check
from rmsweb_kedro.web.sandbox.reference import (
    ReferenceStep,
    TargetNotFound,
    find_element,
    resolve_equivalents,
    resolve_step,
)
from rmsweb_kedro.web.sandbox.registry import Route, Site, World, all_sites
from rmsweb_kedro.web.sandbox.server import DOMAIN, SandboxServer, site_url
from rmsweb_kedro.web.sandbox.tasks import SandboxParams, generate_tasks

__all__ = [
    "DOMAIN",
    "JUDGE_NAME",
    "ReferenceStep",
    "Route",
    "SandboxParams",
    "SandboxServer",
    "Site",
    "TargetNotFound",
    "World",
    "all_sites",
    "check",
    "find_element",
    "generate_tasks",
    "resolve_equivalents",
    "resolve_step",
    "site_url",
]
