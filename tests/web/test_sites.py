"""One package per sandbox site: every folder under web/sandbox/sites/ is a registered site with every part, and the
documented way of adding a site (docs/sandbox.md, "Adding a site") works: its example, written as a new folder, is
served, drawn into tasks and solved by its reference solutions in Chromium, leaving the other sites' tasks as they were."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest

import rmsweb_kedro.web.sandbox.sites as sites_package
from rmsweb_kedro.agents.reference import play_reference
from rmsweb_kedro.contracts.schema import Task
from rmsweb_kedro.web.browser import BrowserEnv
from rmsweb_kedro.web.sandbox import (
    SandboxParams,
    SandboxServer,
    Site,
    World,
    all_sites,
    check,
    generate_tasks,
)
from rmsweb_kedro.web.sandbox.registry import collections, templates

REPO = Path(__file__).resolve().parents[2]


def test_every_site_folder_is_a_registered_site_with_every_part(sandbox_task_list: list[Task]) -> None:
    folders = {p.parent.name for p in Path(sites_package.__file__).parent.glob("*/__init__.py")}
    assert set(all_sites()) == folders >= {"shop", "flights", "dine", "homes", "jobs", "recipes", "hotels"}
    assert [s.order for s in all_sites().values()] == sorted(s.order for s in all_sites().values())
    world = World(0)
    with SandboxServer() as server:
        for name, site in all_sites().items():
            assert isinstance(site, Site) and site.name == name and site.title
            assert world.site(name) is world.site(name)  # built once per world
            assert any(route.pattern == "/" for route in site.routes) and site.templates
            for path, status in (("/", 200), ("/help", 200), ("/no/such/page", 404)):
                response, _ = server.handle("GET", f"{name}.sandbox.test", path, "", {"sid": "parts"})
                assert response.status == status, (name, path)
                assert f"- {site.title}</title>" in response.body
            tasks = [t for t in sandbox_task_list if t.site == name]
            assert {t.metadata["template"] for t in tasks} == set(site.templates)
            for task in tasks:  # a record checker reads one of its own site's collections, by declared fields
                config = task.judge.config
                if config["checker"] == "record":
                    assert set(config["match"]) <= set(site.collections[config["collection"]]), task.id
    assert len(collections()) == len(set(collections()))
    assert list(templates()) == [name for site in all_sites().values() for name in site.templates]


def test_a_split_site_package_states_only_what_is_its_own() -> None:
    """Site.from_package: the name is the folder's, routes and collections its pages', templates its tasks'."""
    from rmsweb_kedro.web.sandbox.sites.shop import pages, tasks

    shop = all_sites()["shop"]
    assert (shop.name, shop.routes, shop.collections, shop.templates) == (
        "shop",
        pages.ROUTES,
        pages.COLLECTIONS,
        tasks.TEMPLATES,
    )
    assert list(shop.templates) == ["shop_price", "shop_cart", "shop_order"]  # each under its function's name
    assert all_sites()["recipes"].collections == {}  # its pages write no state


def test_a_city_draws_its_items_alone() -> None:
    """SiteData.per_city: a city's items come from its own generator, whichever other cities the world has."""
    from rmsweb_kedro.web.sandbox.sites.dine.data import DineData

    world = World(0)
    everywhere = DineData(world).restaurants
    world.pools["cities"] = world.pools["cities"][::-2]
    alone = DineData(world).restaurants
    assert len(alone) == len(everywhere) // 2 and all(alone[city] == everywhere[city] for city in alone)


@pytest.fixture
def kiosk_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    """docs/sandbox.md's example site written as a folder next to the others (the registry rescans)."""
    docs = (REPO / "docs" / "sandbox.md").read_text()
    section = docs[docs.index("## Adding a site") :]
    code = re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)
    folder = tmp_path / "kiosk"
    folder.mkdir()
    (folder / "__init__.py").write_text(code)
    monkeypatch.setattr(sites_package, "__path__", [*sites_package.__path__, str(tmp_path)])
    all_sites.cache_clear()
    try:
        yield all_sites()["kiosk"]
    finally:
        monkeypatch.undo()
        all_sites.cache_clear()
        sys.modules.pop("rmsweb_kedro.web.sandbox.sites.kiosk", None)
    assert "kiosk" not in all_sites()


@pytest.mark.browser
def test_a_site_is_added_by_adding_a_folder(
    kiosk_site: Site, sandbox_task_list: list[Task], sandbox_server: SandboxServer, browser_env: BrowserEnv
) -> None:
    tasks = generate_tasks(SandboxParams())
    kiosk = [t for t in tasks if t.site == "kiosk"]
    assert {t.metadata["template"] for t in kiosk} == {"kiosk_price", "kiosk_reserve"}
    assert all(t.start_url == "http://kiosk.sandbox.test/" for t in kiosk)

    def unchanged(task: Task) -> tuple:
        return task.id, task.instruction, task.reference_solution, task.judge, task.metadata["params"]

    assert [unchanged(t) for t in tasks if t.site != "kiosk"] == [unchanged(t) for t in sandbox_task_list]
    # The session's server (started before the folder existed) serves it: a world builds a site's data on first use.
    server = sandbox_server
    response, _ = server.handle("GET", f"127.0.0.1:{server.port}", "/", "", {})
    assert 'href="/kiosk/"' in response.body
    city = kiosk[0].metadata["params"].get("city", "Oslo")
    response, _ = server.handle("GET", "kiosk.sandbox.test", "/?" + urlencode({"city": city}), "", {})
    assert f"The paper costs {World(0).site('kiosk').price(city):,.2f} USD in {city}." in response.body
    for template in ("kiosk_price", "kiosk_reserve"):
        task = next(t for t in kiosk if t.metadata["template"] == template)
        run = play_reference(browser_env, server, task)
        assert run.error is None and run.verdict.success, (task.id, run)
        if template == "kiosk_reserve":  # the checker reads the new collection: an empty one fails
            assert not check(task, {"paper_reservations": []}, None).success
