"""One place decides device and dtype (modeling.resolve_device / resolve_dtype); load_model follows it."""

import torch

from rmsweb_kedro.modeling import load_model, place_model, resolve_device, resolve_dtype


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
