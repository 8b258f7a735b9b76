"""De-duplication, the selection of critical states with ballast and cap, concentration, and rollout alignment."""

import polars as pl
import pytest

from rmsweb_kedro.contracts.actions import parse_action
from rmsweb_kedro.contracts.schema import STATE_SCHEMA, Step, Task, Trajectory
from rmsweb_kedro.measures.mining import (
    CRITICAL_ORIGINS,
    concentration,
    deduplicate_states,
    divergences,
    page_key,
    reference_index,
    select_states,
    state_row,
    with_origins,
)

#: every origin counts; a state is critical below this competence
RULES = {"critical": CRITICAL_ORIGINS, "competence_threshold": 0.5}


def state(i, instruction="buy a scarf", previous=(), axtree="[1] button 'Go'", action="click(1)", **extra):
    row = {
        "state_id": f"t{i}:0",
        "task_id": f"task{i}",
        "trajectory_id": f"t{i}",
        "step_index": 0,
        "site": "shop",
        "instruction": instruction,
        "previous_actions": list(previous),
        "url": "http://127.0.0.1:8000/shop",
        "axtree": axtree,
        "screenshot": None,
        "reference_thought": None,
        "reference_action": action,
    }
    return {**row, **extra}


def frame(rows, **schema):
    return pl.DataFrame(rows, schema={**STATE_SCHEMA, **schema})


def test_deduplicate_keeps_first_and_counts_copies():
    rows = [
        state(0),
        state(1),  # identical to 0 but for ids and task: folded
        state(2, previous=["click(3)"]),  # other history
        state(3, axtree="[1] button 'Stop'"),  # other page
        state(4, action="click(2)"),  # other reference action
        state(5, instruction="buy a hat"),  # other task text
        state(6, previous=["click(3)"]),  # identical to 2
        state(7, previous=["click(3)", ""]),  # a history that joins the same way must still differ
    ]
    deduped = deduplicate_states(frame(rows))
    assert deduped["state_id"].to_list() == ["t0:0", "t2:0", "t3:0", "t4:0", "t5:0", "t7:0"]
    assert deduped["n_copies"].to_list() == [2, 2, 1, 1, 1, 1]
    assert deduped.columns == [*STATE_SCHEMA.names(), "n_copies"]


def test_deduplicate_names_missing_columns():
    with pytest.raises(ValueError, match="axtree"):
        deduplicate_states(
            pl.DataFrame({"instruction": ["x"], "previous_actions": [[]], "reference_action": ["y"]})
        )


def scored(competences):
    """Probed offline states whose greedy action is right: competence alone makes them critical."""
    rows = [
        state(i, competence=c, n_copies=1, source="offline", step_success=True, failure_mode=None)
        for i, c in enumerate(competences)
    ]
    schema = {"source": pl.String, "step_success": pl.Boolean, "failure_mode": pl.String}
    return frame(rows, competence=pl.Float64, n_copies=pl.Int32, **schema)


def test_select_critical_hardest_first_with_ballast():
    table = scored([0.0, 1.0, 0.5, 1.0, 0.75, 1.0, None, 0.25, 1.0, 1.0])
    mined = select_states(table, **RULES, ballast_share=0.25, cap=None, seed=0)
    critical = mined.filter(pl.col("selection") == "critical")
    assert critical["state_id"].to_list() == ["t0:0", "t7:0"]  # competence 0.0 then 0.25; 0.5 is not below
    ballast = mined.filter(pl.col("selection") == "ballast")
    assert ballast.height == 1 and ballast["competence"][0] >= 0.5  # 1 of 3 rows is ballast (~25%)
    assert "t6:0" not in mined["state_id"].to_list()  # never probed, never selected
    # the same seed draws the same ballast; no ballast when the share is zero
    assert select_states(table, **RULES, ballast_share=0.25, cap=None, seed=0).equals(mined)
    none = select_states(table, **RULES, ballast_share=0.0, cap=None, seed=0)
    assert none["selection"].to_list() == ["critical", "critical"]


def test_select_cap_keeps_proportion_and_hardest():
    table = scored([0.0] * 3 + [0.25] * 5 + [1.0] * 10)
    mined = select_states(table, **RULES, ballast_share=0.5, cap=4, seed=1)
    assert mined.height == 4
    assert mined["selection"].to_list() == ["critical", "critical", "ballast", "ballast"]
    assert mined["competence"].to_list()[:2] == [0.0, 0.0]
    with pytest.raises(ValueError, match="ballast_share"):
        select_states(table, **RULES, ballast_share=1.0, cap=None, seed=0)


def test_concentration():
    corpus = scored([0.0, 1.0, 1.0, 1.0]).with_columns(pl.Series("n_copies", [1, 1, 1, 5], dtype=pl.Int32))
    mined = select_states(corpus, **RULES, ballast_share=0.5, cap=None, seed=0)
    report = concentration(with_origins(corpus, **RULES), mined)
    assert report["corpus"]["share_routine"] == 0.75
    assert report["corpus"]["share_routine_weighted"] == 7 / 8
    assert report["mined"]["share_routine"] == 0.5
    assert report["critical_enrichment"] == 2.0  # 50% critical in the mined set against 25% in the corpus


def test_page_key_ignores_host_port_and_whitespace():
    assert page_key("http://127.0.0.1:8000/shop?q=a", "[1]  link\n'x'") == page_key(
        "http://127.0.0.1:9999/shop?q=a#top", "[1] link 'x'"
    )
    assert page_key("http://h/shop?q=a", "t") != page_key("http://h/shop?q=b", "t")


def test_divergences_align_by_page_state():
    references = frame(
        [
            state(0, axtree="home", action='type(1, "scarf", submit=true)'),
            {**state(0, axtree="results", action="click(4)"), "url": "http://127.0.0.1:8000/shop?q=scarf"},
            {**state(0, axtree="product", action="click(2)"), "url": "http://127.0.0.1:8000/shop/item/4"},
        ]
    )
    index = reference_index(references)
    port = "http://127.0.0.1:7777"

    def step(i, url, axtree, action):
        return Step(index=i, url=port + url, axtree=axtree, action=parse_action(action) if action else None)

    rollout = [
        step(0, "/shop", "home", 'type(1, "Scarf", submit=true)'),  # same as the reference, spelled otherwise
        step(1, "/shop?q=scarf", "results", "click(5)"),  # diverges: another item
        step(2, "/shop/item/5", "another product", "click(2)"),
    ]
    assert divergences(rollout, index) == [(1, [parse_action("click(4)")])]
    # pages no reference saw are passed over; an unparsed action on an aligned page diverges
    detour = [step(0, "/help", "help page", "go_back()"), step(1, "/shop", "home", None)]
    assert divergences(detour, index) == [(1, [parse_action('type(1, "scarf", submit=true)')])]
    assert divergences(rollout[:1], index) == []
    # every page: the rollout comes back home after its wrong click and goes wrong there too, then loops on the
    # results page (a second wrong step on a page already counted adds no state)
    wandering = [
        *rollout[:2],
        step(2, "/shop", "home", "click(9)"),
        step(3, "/shop?q=scarf", "results", "click(6)"),
    ]
    assert divergences(wandering, index, first_only=False) == [
        (1, [parse_action("click(4)")]),
        (2, [parse_action('type(1, "scarf", submit=true)')]),
    ]


def test_an_equivalent_action_is_right_at_an_aligned_page():
    """Pressing Enter in the search box where the reference clicked the submit button (the sandbox's equivalent,
    schema.reference_set) is no divergence; the divergence state carries both as its reference set."""
    references = frame(
        [{**state(0, axtree="form", action="click(3)"), "equivalent_actions": ['press("Enter")']}]
    )
    index = reference_index(references)
    assert index[page_key("http://127.0.0.1:8000/shop", "form")] == [
        parse_action("click(3)"),
        parse_action('press("Enter")'),
    ]
    enter = [
        Step(index=0, url="http://127.0.0.1:9/shop", axtree="form", action=parse_action('press("Enter")'))
    ]
    assert divergences(enter, index) == []
    wrong = [Step(index=0, url="http://127.0.0.1:9/shop", axtree="form", action=parse_action("click(4)"))]
    ((at, right),) = divergences(wrong, index)
    task = Task(
        id="t0",
        source="sandbox",
        site="shop",
        instruction="Find the scarf",
        start_url="http://shop.sandbox.test/",
    )
    row = state_row(task, Trajectory(id="r0", task_id="t0", steps=wrong), at, right)
    assert (row["reference_action"], row["equivalent_actions"]) == ("click(3)", ['press("Enter")'])


def test_reference_index_names_a_bad_record():
    with pytest.raises(ValueError, match=r"t0:0.*reference_action"):
        reference_index(frame([state(0, action="fly()")]))


def test_divergence_states_from_rollouts():
    from rmsweb_kedro.contracts.schema import Task, Trajectory
    from rmsweb_kedro.measures.mining import divergence_states

    task = Task(
        id="task0", source="sandbox", site="shop", start_url="http://h/shop", instruction="buy a scarf"
    )
    references = frame(
        [
            state(0, axtree="home", action='type(1, "scarf", submit=true)'),
            {**state(0, axtree="results", action="click(4)"), "url": "http://h/shop?q=scarf"},
        ]
    ).with_columns(pl.lit("task0").alias("task_id"))

    def rollout(name, steps, success, termination="stop"):
        return Trajectory(
            id=name, task_id="task0", success=success, termination=termination,
            steps=[Step(index=i, url=u, axtree=a, action=parse_action(x)) for i, (u, a, x) in enumerate(steps)],
        )  # fmt: skip

    failed = rollout(
        "r1",
        [
            ("http://h:1/shop", "home", 'type(1, "scarf", submit=true)'),
            ("http://h:1/shop?q=scarf", "results", "click(5)"),
        ],
        False,
    )
    lost = rollout("r2", [("http://h:1/elsewhere", "other", "click(1)")], False)
    solved = rollout("r3", [("http://h:1/shop", "home", 'answer("x")')], True)
    crashed = Trajectory(id="r4", task_id="task0", termination="env_error", steps=[])
    rows, counts = divergence_states([failed, lost, solved, crashed], {"task0": task}, references)
    assert counts == {
        "rollouts": 4, "env_error": 1, "success": 1, "failure": 2, "diverged": 1, "no_aligned_divergence": 1,
        "divergence_states": 1,
    }  # fmt: skip
    assert rows.schema == STATE_SCHEMA
    row = rows.row(0, named=True)
    assert row["state_id"] == "r1:1" and row["step_index"] == 1 and row["url"] == "http://h:1/shop?q=scarf"
    assert row["previous_actions"] == ['type(1, "scarf", submit=true)']
    assert row["reference_action"] == "click(4)" and row["instruction"] == "buy a scarf"


def test_unseen_states():
    from rmsweb_kedro.measures.mining import unseen_states

    known = frame([state(0), state(1, previous=["click(2)"])])
    states = frame([state(5), state(6, previous=["click(2)", "click(3)"]), state(7, axtree="other")])
    assert unseen_states(states, known)["state_id"].to_list() == ["t6:0", "t7:0"]
    assert unseen_states(states, known.clear())["state_id"].to_list() == ["t5:0", "t6:0", "t7:0"]
