"""One place decides device and dtype (modeling.resolve_device / resolve_dtype); load_model follows it."""

import torch

from rmsweb_kedro.models.modeling import load_model, place_model, resolve_device, resolve_dtype


def test_auto_is_the_accelerators_device_and_bf16_only_there():
    from accelerate import PartialState

    assert resolve_device() == PartialState().device  # the device the training loop's Accelerator uses
    expected = torch.bfloat16 if resolve_device().type == "cuda" else torch.float32
    assert resolve_dtype() == expected
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_dtype("bfloat16") == torch.bfloat16 and resolve_dtype("float32") == torch.float32


def test_load_model_places_and_casts_where_it_is_told(tiny_checkpoint):
    model, _ = load_model({"path": str(tiny_checkpoint), "device": "cpu", "dtype": "bfloat16"})
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert {p.device for p in model.parameters()} == {torch.device("cpu")}
    auto, _ = load_model({"path": str(tiny_checkpoint)})
    assert {p.device.type for p in auto.parameters()} == {resolve_device().type}
    assert next(place_model(auto, "cpu", "bfloat16").parameters()).dtype == torch.bfloat16


def test_a_lora_policy_is_saved_as_base_plus_adapter_and_loads_back_trainable(tmp_path, released_checkpoint):
    from rmsweb_kedro.models.modeling import save_checkpoint

    model, processor = load_model({"path": str(released_checkpoint), "lora": {"r": 4, "dropout": 0.0}})
    with torch.no_grad():  # move the adapter away from its zero init, so it changes the outputs
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)
    save_checkpoint(model, processor, tmp_path / "sft_model")
    assert (tmp_path / "sft_model" / "adapter" / "adapter_config.json").exists()
    loaded, _ = load_model({"path": str(tmp_path / "sft_model")})
    ids = torch.tensor([[5, 6, 7, 8]])
    base, _ = load_model({"path": str(released_checkpoint)})
    with torch.no_grad():
        assert torch.allclose(loaded(input_ids=ids).logits, model(input_ids=ids).logits, atol=1e-5)
        with loaded.disable_adapter():  # the reference Salvage-DS uses: the untouched base
            assert torch.allclose(loaded(input_ids=ids).logits, base(input_ids=ids).logits, atol=1e-5)
        assert not torch.allclose(loaded(input_ids=ids).logits, base(input_ids=ids).logits, atol=1e-3)
    assert any(p.requires_grad for n, p in loaded.named_parameters() if "lora_" in n)


def test_every_stage_runs_the_policy_in_the_one_auto_dtype(tiny_checkpoint):
    """No stage pins its own dtype: every ``dtype`` in conf/base (policy specs of mining and evaluate, the
    checkpoint datasets' load_args) is ``auto``, and so is a policy loaded without one; on the CPU that is float32,
    so the default run is unchanged."""
    from pathlib import Path

    import yaml

    from rmsweb_kedro.agents.hf_policy import HFPolicy

    def dtypes(node):
        if isinstance(node, dict):
            for key, value in node.items():
                yield from [value] if key == "dtype" else dtypes(value)
        elif isinstance(node, list):
            for value in node:
                yield from dtypes(value)

    found = {
        path.name: list(dtypes(yaml.safe_load(path.read_text()))) for path in Path("conf/base").glob("*.yml")
    }
    assert {"parameters_mining.yml", "parameters_evaluate.yml", "catalog_sft.yml"} <= {
        name for name, values in found.items() if values
    }
    assert {value for values in found.values() for value in values} == {"auto"}
    policy = HFPolicy.from_pretrained(tiny_checkpoint)
    assert {p.dtype for p in policy.model.parameters()} == {resolve_dtype()}
    if resolve_device().type == "cpu":
        assert resolve_dtype() == torch.float32
