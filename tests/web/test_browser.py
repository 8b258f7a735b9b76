"""BrowserEnv on the real sandbox server with real headless Chromium (one browser for the module)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from rmsweb_kedro.agents.reference import ReferenceAgent, play_reference
from rmsweb_kedro.agents.scripted import describe, describe_taken
from rmsweb_kedro.contracts.actions import Action, parse_action
from rmsweb_kedro.contracts.pagetree import parse_axtree
from rmsweb_kedro.contracts.schema import Step, Task
from rmsweb_kedro.episodes.rollouts import EpisodeSpec, Roles, run_rollouts
from rmsweb_kedro.judges.sandbox import SandboxJudge
from rmsweb_kedro.web.browser import BrowserEnv, format_axtree
from rmsweb_kedro.web.sandbox import SandboxServer, check, find_element, resolve_step

pytestmark = pytest.mark.browser


def stratified_sample(tasks: list[Task]) -> list[Task]:
    """One task per site, cycling through the levels each site has, so every site and level is played."""
    levels = ["easy", "medium", "hard"]
    sample = []
    for index, site in enumerate(sorted({t.site for t in tasks})):
        offered = [t for t in tasks if t.site == site]
        wanted = levels[index % 3]
        sample.append(next((t for t in offered if t.level == wanted), offered[-1]))
    assert {t.level for t in sample} == set(levels)
    return sample


def task_of(tasks: list[Task], template: str) -> Task:
    return next(t for t in tasks if t.metadata["template"] == template)


@pytest.mark.slow
def test_reference_solutions_of_a_stratified_sample_solve_their_tasks(
    browser_env: BrowserEnv, sandbox_server: SandboxServer, sandbox_task_list: list[Task], tmp_path: Path
) -> None:
    for task in stratified_sample(sandbox_task_list):
        run = play_reference(browser_env, sandbox_server, task, tmp_path / task.id)
        assert run.error is None, (task.id, run.error)
        assert run.verdict.success, (task.id, run.verdict.reason)
        shots = sorted((tmp_path / task.id).glob("step_*.png"))
        assert len(shots) == len(task.reference_solution) + 1
        assert shots[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_every_answer_read_off_a_page_is_the_expected_one(
    browser_env: BrowserEnv, sandbox_server: SandboxServer, sandbox_task_list: list[Task]
) -> None:
    """One task of each template whose answer step reads the page (``read``): the reference solution, played in
    Chromium, reads exactly the expected answer, so each pattern finds the right value first on the right page."""
    templates = sorted(
        {t.metadata["template"] for t in sandbox_task_list if t.reference_solution[-1].get("read")}
    )
    assert len(templates) == 9  # every answer template but recipe_compare (compared across two pages)
    for template in templates:
        task = task_of(sandbox_task_list, template)
        run = play_reference(browser_env, sandbox_server, task)
        assert run.error is None and run.verdict.success, (task.id, run.error, run.verdict.reason)
        assert parse_action(run.actions[-1]).text == task.reference_solution[-1]["text"], task.id


def test_observation_format_and_stable_ids(browser_env: BrowserEnv, sandbox_task_list: list[Task]) -> None:
    task = task_of(sandbox_task_list, "shop_cart")
    first = browser_env.reset(task)
    assert first.url == "http://shop.sandbox.test/" and first.title == "Home - Shopwell"
    lines = first.axtree.splitlines()
    assert lines[:3] == ['link "Shopwell" [1]', 'link "Help" [2]', 'link "Cart" [3]']
    assert 'textbox "Search products" [4]' in lines and 'heading "Shopwell"' in lines
    assert lines[-2:] == ['button "Accept cookies" [6]', 'button "Reject" [7]']
    assert [e.id for e in first.elements] == list(range(1, 8))
    assert all(e.bbox and e.bbox[2] > 0 for e in first.elements)
    after_cookies = browser_env.step(resolve_step(task.reference_solution[0], first))
    assert after_cookies.error is None and "Accept cookies" not in after_cookies.axtree
    assert after_cookies.axtree.splitlines()[:6] == lines[:6]  # the page's own ids do not move
    results = browser_env.step(resolve_step(task.reference_solution[1], after_cookies))
    product = task.metadata["params"]["product"]
    assert f'link "{product}"' in results.axtree and 'combobox "Sort by"' in results.axtree
    links_besides_header = sum(e.role == "link" for e in results.elements) - 3
    assert 3 <= links_besides_header <= 5
    assert len(results.axtree) < 700
    again = browser_env.step(parse_action("wait(0)"))
    assert again.axtree == results.axtree  # same page, same ids
    assert 'value="Relevance"' in again.axtree
    # a recorded step keeps the text only: the elements read back from it are the observation's
    for observation in (first, results):
        parsed = parse_axtree(observation.axtree)
        assert [(e.id, e.role, e.name) for e in parsed] == [
            (e.id, e.role, e.name) for e in observation.elements
        ]
    assert [e.value for e in parse_axtree(results.axtree) if e.role == "combobox"] == ["Relevance"]
    item = {"kind": "element", "id": 9, "role": "link", "name": 'Say "hi" \\ bye', "value": None, "tag": "a"}
    text, _ = format_axtree([{**item, "bbox": [0, 0, 1, 1]}])
    assert text == 'link "Say \\"hi\\" \\\\ bye" [9]' and parse_axtree(text)[0].name == 'Say "hi" \\ bye'


@pytest.mark.slow
def test_every_page_tree_of_the_reference_solutions_reads_back_through_the_one_parser(
    browser_env: BrowserEnv, sandbox_task_list: list[Task]
) -> None:
    """One task of every template, each reference step played in Chromium: on every page the browser wrote, the
    page-tree parser (contracts/pagetree.py) finds exactly the observation's elements (id, role, name; the value the
    line carries), no text line parses as one, and the scripted reflector names each step's target as the page
    did."""
    pages = lines = 0
    for template in sorted({t.metadata["template"] for t in sandbox_task_list}):
        task = task_of(sandbox_task_list, template)
        observation = browser_env.reset(task)
        for step in task.reference_solution:
            parsed = parse_axtree(observation.axtree)
            assert [(e.id, e.role, e.name) for e in parsed] == [
                (e.id, e.role, e.name) for e in observation.elements
            ], (task.id, observation.url)
            # the same list: so no text line parsed as an element, and no element line was missed
            values = {e.id: e.value for e in observation.elements}
            assert all(e.value == values[e.id] for e in parsed if e.role == "combobox"), task.id
            lines += len(observation.axtree.splitlines())
            action = resolve_step(step, observation)
            if action.element is not None:
                target = next(e for e in observation.elements if e.id == action.element)
                taken = Step(index=0, url=observation.url, axtree=observation.axtree, action=action)
                expected = describe(
                    action.type.value, target.role, target.name, action.argument, action.submit
                )
                assert describe_taken(taken) == expected, (task.id, action)
            pages += 1
            observation = browser_env.step(action)
            assert observation.error is None, (task.id, observation.error)
    assert pages > 50 and lines > 500, (pages, lines)


def test_agent_mistakes_become_errors_not_exceptions(
    browser_env: BrowserEnv, sandbox_task_list: list[Task]
) -> None:
    observation = browser_env.reset(task_of(sandbox_task_list, "shop_price"))
    assert browser_env.step(parse_action("click(99)")).error == "element 99 is not on the page"
    assert "not an <input>" in (browser_env.step(parse_action('type(1, "x")')).error or "")
    assert "not a combobox" in browser_env.step(parse_action('select_option(1, "x")')).error
    assert browser_env.step(parse_action('press("NoSuchKey")')).error
    help_link = find_element(observation, "link", "Help")
    x, y, width, height = help_link.bbox
    by_point = browser_env.step(Action(type="click", x=x + width / 2, y=y + height / 2))
    assert by_point.error is None and by_point.url == "http://shop.sandbox.test/help"
    assert browser_env.step(parse_action("go_back()")).url == "http://shop.sandbox.test/"


def test_memorize_leaves_the_page_as_it_was(browser_env: BrowserEnv, sandbox_task_list: list[Task]) -> None:
    """``memorize`` touches no page (its fact lives in the episode's history): same URL, same tree, no error,
    and the episode goes on from there."""
    before = browser_env.reset(task_of(sandbox_task_list, "shop_price"))
    after = browser_env.step(parse_action('memorize("the Help link is [2]")'))
    assert (after.url, after.axtree, after.error, after.env_error) == (before.url, before.axtree, None, False)
    assert not browser_env.done
    help_link = find_element(after, "link", "Help")
    assert browser_env.step(Action(type="click", element=help_link.id)).url == "http://shop.sandbox.test/help"


_POINTER_PAGE = (
    "data:text/html,<title>pointer</title>"
    "<input aria-label=City value=Oslo><input aria-label=Date type=date>"
    "<button disabled>Closed</button><button id=under onclick=\"document.title='reached'\">Under</button>"
    "<div id=veil style='position:fixed;inset:0;background:rgba(0,0,0,.3)'>Please wait</div>"
)


def test_pointer_and_keyboard_actions_reach_only_what_a_person_could(
    browser_env: BrowserEnv, sandbox_task_list: list[Task]
) -> None:
    browser_env.reset(task_of(sandbox_task_list, "shop_price"))
    page = browser_env.step(Action(type="goto", url=_POINTER_PAGE))
    assert page.error is None and page.title == "pointer"
    ids = {e.name: e.id for e in page.elements}
    covered = browser_env.step(parse_action(f"click({ids['Under']})"))
    assert covered.error == f'element {ids["Under"]} is covered by <div id=veil> "Please wait"'
    assert covered.title == "pointer"  # the click did not land
    assert (
        browser_env.step(parse_action(f"click({ids['Closed']})")).error
        == f"element {ids['Closed']} is disabled"
    )
    typed = browser_env.step(parse_action(f'type({ids["City"]}, "Bergen")'))  # replaces, not appends
    assert typed.error is None and 'textbox "City" [1] value="Bergen"' in typed.axtree
    cleared = browser_env.step(parse_action(f'type({ids["City"]}, "")'))
    assert 'textbox "City" [1]\n' in cleared.axtree + "\n" and "Bergen" not in cleared.axtree
    dated = browser_env.step(parse_action(f'type({ids["Date"]}, "2027-04-02")'))
    assert dated.error is None and 'value="2027-04-02"' in dated.axtree
    wrong = browser_env.step(parse_action(f'type({ids["Date"]}, "next friday")'))
    assert wrong.error and "does not accept" in wrong.error


def test_allow_list_blocks_other_sites_and_local_files(
    browser_env: BrowserEnv, sandbox_task_list: list[Task]
) -> None:
    browser_env.reset(task_of(sandbox_task_list, "shop_price"))
    for url in (
        "http://flights.sandbox.test/",
        "http://example.org/",
        "file:///etc/passwd",
        "chrome://version",
    ):
        observation = browser_env.step(parse_action(f'goto("{url}")'))
        assert observation.error and "allow-list" in observation.error, url
        assert observation.url == "http://shop.sandbox.test/"
    fine = browser_env.step(parse_action('goto("http://shop.sandbox.test/help")'))
    assert fine.error is None and fine.url.endswith("/help")
    # a page that tries to leave by itself is stopped as well
    browser_env._page.evaluate("location.href = 'http://example.org/'")
    assert "example.org" not in browser_env.step(parse_action("wait(0)")).url


def test_new_tab_becomes_the_active_page(browser_env: BrowserEnv, sandbox_task_list: list[Task]) -> None:
    task = task_of(sandbox_task_list, "recipe_fact")
    observation = browser_env.reset(task)
    for step in task.reference_solution[:3]:
        observation = browser_env.step(resolve_step(step, observation))
    printed = browser_env.step(
        resolve_step({"action": "click", "target": {"role": "link", "name": "Print version"}}, observation)
    )
    assert printed.error is None and "/print/" in printed.url
    assert len(printed.tabs) == 2 and printed.tabs[-1] == printed.url


def test_late_results_need_a_wait(browser_env: BrowserEnv, sandbox_task_list: list[Task]) -> None:
    task = task_of(sandbox_task_list, "flight_book")
    observation = browser_env.reset(task)
    steps = task.reference_solution
    wait_at = next(i for i, s in enumerate(steps) if s["action"] == "wait")
    for step in steps[:wait_at]:
        observation = browser_env.step(resolve_step(step, observation))
    assert "Searching flights" in observation.axtree and "Select " not in observation.axtree
    observation = browser_env.step(resolve_step(steps[wait_at], observation))
    assert "Select " in observation.axtree and "Searching flights" not in observation.axtree


def test_set_of_marks_changes_the_screenshot(
    browser_env: BrowserEnv, sandbox_task_list: list[Task], tmp_path: Path
) -> None:
    task = task_of(sandbox_task_list, "shop_price")
    plain = Path(browser_env.reset(task, tmp_path / "plain").screenshot)
    browser_env.config.set_of_marks = True
    try:
        marked = Path(browser_env.reset(task, tmp_path / "marked").screenshot)
    finally:
        browser_env.config.set_of_marks = False
    assert plain.read_bytes() != marked.read_bytes()
    assert "__rms_mark" not in browser_env._page.content()


def renderer_pids(env: BrowserEnv) -> list[int]:
    """The renderer processes under this env's Chromium (they do not carry the env's tag)."""
    family = env.process_tree()
    renderers = []
    for pid in family:
        try:
            if b"--type=renderer" in Path(f"/proc/{pid}/cmdline").read_bytes():
                renderers.append(pid)
        except OSError:
            continue
    return renderers


# A killed renderer surfaces as a plain Playwright Error ("Target crashed"): the page's crash event tells it apart
# from the agent's faults; a killed browser surfaces as TargetClosedError.
@pytest.mark.parametrize("victims", ["browser", "renderer"])
def test_killed_browser_is_restarted_and_the_episode_goes_on(
    browser_env: BrowserEnv, sandbox_server: SandboxServer, sandbox_task_list: list[Task], victims: str
) -> None:
    task = task_of(sandbox_task_list, "shop_cart")
    steps = task.reference_solution
    observation = browser_env.reset(task)
    for step in steps[:4]:
        observation = browser_env.step(resolve_step(step, observation))
    url_before, restarts = observation.url, browser_env.restarts
    pids = browser_env.browser_pids() if victims == "browser" else renderer_pids(browser_env)
    assert pids
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    crashed = browser_env.step(resolve_step(steps[4], observation))
    assert crashed.env_error and "restarted" in crashed.error
    assert browser_env.restarts == restarts + 1 and crashed.url == url_before
    observation = crashed
    for step in steps[4:]:  # the session (cookie) survived: redo the step and finish
        observation = browser_env.step(resolve_step(step, observation))
        assert observation.error is None
    assert check(task, sandbox_server.session_state(browser_env.session_id), browser_env.final_answer).success


def test_each_episode_starts_a_clean_session_in_the_same_context(
    browser_env: BrowserEnv, sandbox_server: SandboxServer, sandbox_task_list: list[Task]
) -> None:
    """reset() empties the live context instead of starting one (what a new context costs: docs/sandbox.md), and
    the next episode sees nothing of the last: no consent or session cookie, no server-side cart, no storage, no
    history."""
    task = task_of(sandbox_task_list, "shop_cart")
    observation = browser_env.reset(task)
    for step in task.reference_solution:
        observation = browser_env.step(resolve_step(step, observation))
    first_session = browser_env.session_id
    assert sandbox_server.session_state(first_session)["cart"]  # the first episode filled its cart
    page = browser_env._page  # storage a site could have written: the agent has no action that writes it
    page.evaluate("localStorage.setItem('seen', '1'); sessionStorage.setItem('seen', '1')")
    context = browser_env._context

    again = browser_env.reset(task)
    assert browser_env._context is context and browser_env._page is not page
    assert 'button "Accept cookies"' in again.axtree  # the consent cookie is gone
    assert browser_env.session_id is None or browser_env.session_id != first_session
    assert not sandbox_server.session_state(browser_env.session_id)["cart"]
    assert browser_env._page.evaluate("[localStorage.length, sessionStorage.length]") == [0, 0]
    assert browser_env.step(parse_action("go_back()")).error == "there is no previous page"


@pytest.mark.slow
def test_parallel_envs_keep_separate_carts(
    sandbox_server: SandboxServer, sandbox_task_list: list[Task], browser_config
) -> None:
    tasks = [t for t in sandbox_task_list if t.metadata["template"] == "shop_cart"][:2]
    assert tasks[0].metadata["params"]["product"] != tasks[1].metadata["params"]["product"]

    class CartJudge(SandboxJudge):  # the checker's verdict, with the cart of the episode's own session
        def judge(self, task, steps, final_answer, context):
            verdict, usage = super().judge(task, steps, final_answer, context)
            verdict.details["cart"] = self.session_state(context["session_id"])["cart"]
            return verdict, usage

    results = run_rollouts(
        [EpisodeSpec(key=t.id, task=t, max_steps=20) for t in tasks],
        Roles(agent=lambda _seed: ReferenceAgent(), judge=lambda _server: CartJudge(sandbox_server.session_state)),
        browsers=2, browser=browser_config, progress=None,
    )  # fmt: skip
    for task, (run,) in zip(tasks, results, strict=True):
        cart = run.verdict.details["cart"]
        assert run.verdict.success, run.verdict.reason
        assert [item["product"] for item in cart] == [task.metadata["params"]["product"]]


@pytest.mark.slow
def test_declared_equivalents_do_what_the_reference_step_does(
    browser_env: BrowserEnv, sandbox_server: SandboxServer, sandbox_task_list: list[Task]
) -> None:
    """Every kind of declared equivalent (one task per template that declares one), played in the reference step's
    place, reaches the page the reference step reaches and the task's checker still passes."""
    from rmsweb_kedro.web.sandbox import resolve_equivalents

    templates = sorted(
        {
            t.metadata["template"]
            for t in sandbox_task_list
            if any(s.get("equivalents") for s in t.reference_solution)
        }
    )
    assert {"flight_book", "job_apply", "shop_order", "homes_viewing", "hotel_book"} <= set(templates)
    for template in templates:
        task = task_of(sandbox_task_list, template)
        at = next(i for i, s in enumerate(task.reference_solution) if s.get("equivalents"))
        urls = {}
        for use_equivalent in (False, True):
            observation = browser_env.reset(task)
            for index, step in enumerate(task.reference_solution):
                action = resolve_step(step, observation)
                if index == at and use_equivalent:
                    (action,) = resolve_equivalents(step, observation)
                    assert action == parse_action('press("Enter")')
                observation = browser_env.step(action)
                assert observation.error is None, (task.id, index, observation.error)
                if index == at:
                    urls[use_equivalent] = observation.url
            verdict = check(
                task, sandbox_server.session_state(browser_env.session_id), browser_env.final_answer
            )
            assert verdict.success, (task.id, use_equivalent, verdict.reason)
        assert urls[True] == urls[False], task.id
