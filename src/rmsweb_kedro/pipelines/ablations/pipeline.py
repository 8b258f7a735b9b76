"""The ``ablations`` pipeline: wiring only. Every variant is an existing stage's own pipeline reused under the
namespace ``ablations.<variant>`` (its free inputs are the default run's datasets unless the variant replaces
them), with parameters ``params:ablations.<variant>.<stage>``: config (conf/base/parameters_ablations.yml), the
stage's parameters + ``ablations.budget.<stage>`` + the variant's change. Not part of ``__default__``: it runs on
what the default run left in data/. :func:`second_round` (``kedro run --pipelines second_round``) is built the same
way, under the namespace ``second_round``, on the default run's ``rmsweb_model``.

This package imports no other pipeline: the registry (pipeline_registry.py) hands it the recipe's stages and the
evaluate stage's builders (:class:`Reused`)."""

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kedro.pipeline import Node, Pipeline, pipeline

from rmsweb_kedro.measures import reporting
from rmsweb_kedro.pipelines import bind
from rmsweb_kedro.pipelines.ablations import nodes

#: (a) Collection modes at the same attempt budget, each corpus through trajectories -> sft_data -> SFT.
COLLECTION_MODES = ("single", "independent_retries", "reflection_retries")
#: (c) Salvage-DS modes on the mined critical states; (b) ``rl_full_corpus`` is salvage_ds on every SFT state.
SALVAGE_MODES = ("grpo", "dapo", "salvage_ds", "salvage_ds_no_anchor")  # training.salvage_ds.Mode
#: (e) Salvage-DS's parts one at a time, each against rl_salvage_ds: variant -> what it changes (its parameters are
#: parameters_ablations.yml's ``ablations.<variant>.salvage_ds``): the reward, the competence band of the gate.
SALVAGE_PARTS = {
    "rl_partial_reward": "mode salvage_ds, partial-credit reward (type, target, argument) for the polarized one",
    "rl_no_band": "mode salvage_ds, the gate's competence band open (c_low 0, c_high 1): contrast alone",
}
FULL_CORPUS = "rl_full_corpus"
REFERENCE = "sft_default"
#: (f) RL rounds, at the same total updates and sampled actions: the first round is ``rl_salvage_ds`` (a round's
#: budget from the SFT model); ``rl_second_round`` mines its model's failures and trains from it a round more;
#: ``rl_one_round_long`` is one round of both rounds' budget from the SFT model.
FIRST_ROUND = "rl_salvage_ds"
SECOND_ROUND = "rl_second_round"
ONE_ROUND_LONG = "rl_one_round_long"
ROUNDS_GROUP = "RL rounds"


@dataclass(frozen=True)
class Reused:
    """What the ablations reuse, handed over by the registry: the recipe's stage pipelines by name (``collect``,
    ``trajectories``, ``sft_data``, ``sft``, ``mining``, ``salvage_ds``), and the evaluate stage's builders:
    ``model_evaluation(models)`` (label -> checkpoint dataset: offline and online evaluation, ``model_comparison``)
    and ``report_nodes(extra)`` (the claims and the report, ``extra`` adding ``build_report`` inputs)."""

    stages: Mapping[str, Pipeline]
    model_evaluation: Callable[[dict[str, str]], Pipeline]
    report_nodes: Callable[[dict[str, str]], Pipeline]


def _reuse(
    stage: Pipeline,
    namespace: str,
    configured: tuple[str, ...],
    replaced: dict[str, str] | None = None,
) -> Pipeline:
    """``stage`` under ``namespace`` (``ablations.<variant>``, ``second_round``): the ``configured`` parameters are
    ``<namespace>.<stage>``, the rest are the stage's own; free inputs are the default run's datasets unless
    ``replaced`` names another."""
    free = stage.inputs()
    own = {name.removeprefix("params:") for name in free if name.startswith("params:")}
    mapped = {name: f"{namespace}.{name}" if name in configured else name for name in own}
    return pipeline(
        stage,
        namespace=namespace,
        inputs={name: (replaced or {}).get(name, name) for name in free if not name.startswith("params:")},
        parameters=mapped,
    )


def _without_base(stage: Pipeline) -> Pipeline:
    """The sft stage without building a base model: every corpus fine-tunes the default run's ``sft_model``
    (wired in :func:`_collection_variant`), so the variants differ by their data only, and start from a policy
    that solves tasks, whose steps on them can be compared."""
    return stage - stage.only_nodes_with_outputs("base_model")


def _collection_variant(mode: str, stages: Mapping[str, Pipeline]) -> Pipeline:
    variant = f"collect_{mode}"
    chain = stages["collect"] + stages["trajectories"] + stages["sft_data"] + _without_base(stages["sft"])
    namespaced = _reuse(
        chain,
        f"ablations.{variant}",
        ("collect", "trajectories", "sft_data", "sft"),
        replaced={"tasks": "ablations.collection_pool", "base_model": "sft_model"},
    )
    describe = Node(
        bind(nodes.describe_collection_variant, variant=variant, mode=mode),
        inputs=[
            f"ablations.{variant}.{name}" for name in ("collection_stats", "sft_states_train", "sft_metrics")
        ],
        outputs=f"ablations.{variant}.facts",
        name="describe_variant",
        namespace=f"ablations.{variant}",
    )
    return Pipeline([describe]) + namespaced


def _rl_variant(
    variant: str,
    chain: Pipeline,
    configured: tuple[str, ...],
    setting: str,
    group: str,
    after: str | None = None,
) -> Pipeline:
    """``chain`` (ending in salvage_ds) as the variant ``variant`` and its facts; ``after``: the variant whose
    ``rmsweb_model`` it starts from instead of the SFT model (its earlier round, counted in the facts)."""
    replaced = {"sft_model": f"ablations.{after}.rmsweb_model"} if after else None
    rounds = [f"ablations.{after}.salvage_ds_report"] if after else []
    return _reuse(chain, f"ablations.{variant}", configured, replaced) + Pipeline(
        [
            Node(
                bind(nodes.describe_rl_variant, variant=variant, group=group, setting=setting),
                inputs=[*rounds, f"ablations.{variant}.salvage_ds_report"],
                outputs=f"ablations.{variant}.facts",
                name="describe_variant",
                namespace=f"ablations.{variant}",
            )
        ]
    )


def create_pipeline(reused: Reused, **kwargs) -> Pipeline:
    """Every variant, their evaluation, the comparison table, the claims between variants and the report
    re-rendered with its section."""
    models = _evaluated_models()
    return (
        _variants(reused.stages)
        + _evaluation(reused, models)
        + _report(reused)
        + _variant_claims(reused)
        + _comparison([f"ablations.{variant}.facts" for variant in models])
    )


def _variants(stages: Mapping[str, Pipeline]) -> Pipeline:
    """Every variant's stages: (a) the collection modes, (c) the Salvage-DS modes, (e) its parts, (b) the full
    corpus, (f) the RL rounds."""
    collection = [_collection_variant(mode, stages) for mode in COLLECTION_MODES]
    modes = [
        _rl_variant(f"rl_{mode}", stages["salvage_ds"], ("salvage_ds",), f"mode {mode}, mined states",
                    "Salvage-DS mode")
        for mode in SALVAGE_MODES
    ]  # fmt: skip
    parts = [_rl_variant(v, stages["salvage_ds"], ("salvage_ds",), setting, "Salvage-DS part")
             for v, setting in SALVAGE_PARTS.items()]  # fmt: skip
    full = _rl_variant(
        FULL_CORPUS,
        stages["mining"].only_nodes_with_outputs("critical_states") + stages["salvage_ds"],
        ("mining", "salvage_ds"),
        "mode salvage_ds, every SFT training state (rl_corpus: full); compare rl_salvage_ds (mined)",
        "RL corpus",
    )
    return sum(collection + modes + parts, Pipeline([])) + full + _rounds(stages)


def _rounds(stages: Mapping[str, Pipeline]) -> Pipeline:
    """(f) Two rounds against one of the same total updates and sampled actions (parameters_ablations.yml): the
    whole mining stage on the first round's model, then salvage_ds from that model; one round of twice the updates
    from the SFT model on the default run's mined states."""
    second = _rl_variant(
        SECOND_ROUND,
        stages["mining"] + stages["salvage_ds"],
        ("mining", "salvage_ds"),
        f"two rounds: {FIRST_ROUND}, then mining its model and Salvage-DS from it (steps, states: both rounds)",
        ROUNDS_GROUP,
        after=FIRST_ROUND,
    )
    long = _rl_variant(
        ONE_ROUND_LONG,
        stages["salvage_ds"],
        ("salvage_ds",),
        "one round from the SFT model on its mined states, both rounds' updates and sampled actions",
        ROUNDS_GROUP,
    )
    return second + long


def _evaluated_models() -> dict[str, str]:
    """Every model the ablations evaluate: label -> its checkpoint dataset (the reference is the default run's
    ``sft_model``)."""
    models = {f"collect_{m}": f"ablations.collect_{m}.sft_model" for m in COLLECTION_MODES}
    models |= {REFERENCE: "sft_model"}
    models |= {f"rl_{m}": f"ablations.rl_{m}.rmsweb_models" for m in SALVAGE_MODES}
    models |= {FULL_CORPUS: f"ablations.{FULL_CORPUS}.rmsweb_models"}
    models |= {variant: f"ablations.{variant}.rmsweb_models" for variant in SALVAGE_PARTS}
    models |= {variant: f"ablations.{variant}.rmsweb_models" for variant in (SECOND_ROUND, ONE_ROUND_LONG)}
    return models


def second_round(reused: Reused) -> Pipeline:
    """``kedro run --pipelines second_round``, after the default run: the mining stage on its ``rmsweb_model`` and
    Salvage-DS from that model, under the namespace ``second_round`` (parameters ``second_round.mining`` and
    ``second_round.salvage_ds``), then the evaluate stage's evaluation and claims of ``second_round.rmsweb_models``
    against ``rmsweb_model`` (``second_round.model_comparison``, ``second_round.claims_vs_run``)."""
    models = {"rmsweb": "rmsweb_model", "second_round": "second_round.rmsweb_models"}
    rounds = _reuse(
        reused.stages["mining"] + reused.stages["salvage_ds"],
        "second_round",
        ("mining", "salvage_ds"),
        replaced={"sft_model": "rmsweb_model"},
    )
    evaluation = pipeline(
        reused.model_evaluation(models) + reused.report_nodes().only_nodes_with_outputs("claims_vs_run"),
        namespace="second_round",
        inputs={"sft_states_val", "tasks", "collection_log", *models.values()},
        parameters={"evaluate": "second_round.evaluate", "rollouts": "rollouts"},
    )
    return rounds + evaluation


def _evaluation(reused: Reused, models: dict[str, str]) -> Pipeline:
    """The evaluate stage's offline and online evaluation of ``models`` (``ablations.model_comparison``)."""
    return pipeline(
        reused.model_evaluation(models),
        namespace="ablations",
        inputs={"sft_states_val", "tasks", *models.values()},
        parameters={
            "evaluate": "ablations.evaluate",
            "rollouts": "rollouts",
        },  # one rollouts block for every run
    )


def _report(reused: Reused) -> Pipeline:
    """The evaluate stage's report, re-rendered from the default run's tables with the ablations' section."""
    return pipeline(
        reused.report_nodes({"ablations": "ablations.report_section"}),
        namespace="ablations",
        inputs={
            name: name
            for name in (
                "model_comparison", "online_breakdown", "offline_by_step_kind", "evaluation_collection_table",
                "evaluation_failure_modes", "run_manifest", "online_episodes", "offline_predictions",
                "salvage_ds_report",
            )
        } | {
            "reflection_steps": "ablations.reflection_steps",
            "collection_log": "ablations.collection_log",
            "ablations.report_section": "ablations.report_section",
        },
        parameters={"evaluate"},
    )  # fmt: skip


def _variant_claims(reused: Reused) -> Pipeline:
    """The report's claims node over the variants' episodes, with the ablations' own claims (ablations.claims)."""
    return pipeline(
        reused.report_nodes().only_nodes_with_outputs("claims_vs_run"),
        namespace="ablations.variants",
        inputs={
            "online_episodes": "ablations.online_episodes",
            "offline_predictions": "ablations.offline_predictions",
            "collection_log": "ablations.collection_log",
        },
        outputs={"claims_vs_run": "ablation_claims"},
        parameters={"evaluate": "ablations.evaluate"},
    )


def _comparison(facts: list[str]) -> Pipeline:
    """The collection pool the collection variants draw from, the reference's facts, the variants' collection
    logs gathered, and the comparison: table, markdown, plot and the report's section."""
    return Pipeline(
        [
            Node(
                nodes.collection_pool,
                inputs=["tasks", "sft_states_train", "sft_states_val", "sft_states_dev"],
                outputs="ablations.collection_pool",
                name="collection_pool",
                namespace="ablations",
            ),
            Node(
                bind(nodes.describe_reference, variant=REFERENCE),
                inputs=["sft_states_train", "sft_metrics"],
                outputs=f"ablations.{REFERENCE}.facts",
                name="describe_variant",
                namespace=f"ablations.{REFERENCE}",
            ),
            Node(
                reporting.concat_tables,
                inputs=[f"ablations.collect_{m}.collection_log" for m in COLLECTION_MODES],
                outputs="ablations.collection_log",
                name="gather_collection_logs",
                namespace="ablations",
            ),
            Node(
                reporting.reflection_steps,
                inputs="ablations.collection_log",
                outputs="ablations.reflection_steps",
                name="reflection_steps",
                namespace="ablations",
            ),
            Node(
                nodes.ablation_table,
                inputs=["ablations.model_comparison", *facts],
                outputs="ablation_comparison",
                name="ablation_table",
                namespace="ablations",
            ),
            Node(
                nodes.ablation_markdown,
                inputs="ablation_comparison",
                outputs="ablation_comparison_md",
                name="ablation_markdown",
                namespace="ablations",
            ),
            Node(
                nodes.plot_ablations,
                inputs="ablation_comparison",
                outputs="ablation_plot",
                name="plot_ablations",
                namespace="ablations",
            ),
            Node(
                nodes.ablation_section,
                inputs={
                    "table": "ablation_comparison",
                    "claims": "ablation_claims",
                    "steps": "ablations.reflection_steps",
                    "collect_tasks": "params:ablations.budget.collect.max_tasks",
                    "sft_steps": "params:ablations.budget.sft.training.loop.max_steps",
                    "salvage_ds_steps": "params:ablations.budget.salvage_ds.loop.max_steps",
                    "online": "params:ablations.evaluate.online.enabled",
                },
                outputs="ablations.report_section",
                name="report_section",
                namespace="ablations",
            ),
        ]
    )
