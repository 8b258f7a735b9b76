"""The ``ablations`` pipeline: wiring only. Every variant is an existing stage's own pipeline reused under the
namespace ``ablations.<variant>`` (its free inputs are the default run's datasets unless the variant replaces
them), with parameters ``params:ablations.<variant>.<stage>``: config (conf/base/parameters_ablations.yml), the
stage's parameters + ``ablations.budget.<stage>`` + the variant's change. Not part of ``__default__``: it runs on
what the default run left in data/.

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
    variant: str,
    configured: tuple[str, ...],
    replaced: dict[str, str] | None = None,
) -> Pipeline:
    """``stage`` under ``ablations.<variant>``: the ``configured`` parameters are the variant's, the rest are the
    stage's own; free inputs are the default run's datasets unless ``replaced`` names another."""
    namespace = f"ablations.{variant}"
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
        variant,
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
    variant: str, chain: Pipeline, configured: tuple[str, ...], setting: str, group: str
) -> Pipeline:
    return _reuse(chain, variant, configured) + Pipeline(
        [
            Node(
                bind(nodes.describe_rl_variant, variant=variant, group=group, setting=setting),
                inputs=f"ablations.{variant}.salvage_ds_report",
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
    corpus."""
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
    return sum(collection + modes + parts, Pipeline([])) + full


def _evaluated_models() -> dict[str, str]:
    """Every model the ablations evaluate: label -> its checkpoint dataset (the reference is the default run's
    ``sft_model``)."""
    models = {f"collect_{m}": f"ablations.collect_{m}.sft_model" for m in COLLECTION_MODES}
    models |= {REFERENCE: "sft_model"}
    models |= {f"rl_{m}": f"ablations.rl_{m}.rmsweb_models" for m in SALVAGE_MODES}
    models |= {FULL_CORPUS: f"ablations.{FULL_CORPUS}.rmsweb_models"}
    models |= {variant: f"ablations.{variant}.rmsweb_models" for variant in SALVAGE_PARTS}
    return models


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
