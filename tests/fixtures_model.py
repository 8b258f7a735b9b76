"""Shared model fixtures (saved tiny Qwen3-VL checkpoints and the states they were built on).

``tiny_states``: 120 STATE_SCHEMA rows (dicts) of a small shop-like task family, 40 tasks of 3 steps (search,
open the named item, add it to the cart), page-order element ids written ``role "name" [id]``.
``tiny_checkpoint``: a directory saved once per session (tiny Qwen3-VL, tokenizer trained on those states);
load it with ``modeling.load_model({"path": str(tiny_checkpoint)})`` or plain ``from_pretrained``.
``screenshot_states``: the first 12 of them with a screenshot file each (PNG, 320x200, the page drawn as text).
``released_checkpoint``: a Qwen3-VL-Instruct dir in the released layout at tiny size
(``modeling.write_released_layout``): vision tower with deepstack layers, released image processor (16-pixel
patches, 2x2 merge, 256x256 to 4096x4096 pixels), Qwen's added tokens, the released chat template WITHOUT
generation markers, the released sampling defaults. Every production-path test runs on it.
``lora_policy``: ``tests/salvage_ds/conftest.py``'s ``lora_tiny()`` (LoRA model, processor, states, prompt config),
trained once a session for the served-sampler, managed-server and shutdown tests: a test that changes the model
changes a ``copy.deepcopy`` of it.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

ITEMS = [
    "scarf",
    "lamp",
    "mug",
    "chair",
    "kettle",
    "teapot",
    "blanket",
    "pillow",
    "candle",
    "vase",
    "clock",
    "rug",
]
COLOURS = ["blue", "red", "green", "black", "white", "yellow"]
#: ``released_checkpoint``'s sizes (modeling.ModelSizeConfig): untied embeddings as the 8B, two deepstack layers
#: fed from a 4-block vision tower, small enough for the multi-process tests.
RELEASED_TINY = {
    "vocab_size": 1024, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "head_dim": 16,
    "tie_word_embeddings": False, "vision_depth": 4, "vision_hidden_size": 32, "vision_intermediate_size": 64,
    "deepstack_visual_indexes": [1, 3],
}  # fmt: skip


def make_states(n_tasks: int = 40, seed: int = 0) -> list[dict]:
    """Synthetic policy states (STATE_SCHEMA rows): three steps a task, ids stable per page, lists of 4 items."""
    rng = random.Random(seed)
    states = []
    for t in range(n_tasks):
        item = f"{rng.choice(COLOURS)} {rng.choice(ITEMS)}"
        task_id, trajectory_id = f"shop-{t:03d}", f"shop-{t:03d}-a1"
        instruction = f"Add the {item} to the cart"
        results = [item, *(f"{rng.choice(COLOURS)} {rng.choice(ITEMS)}" for _ in range(3))]
        rng.shuffle(results)
        search_page = 'textbox "Search" [1]\nbutton "Go" [2]\nlink "Cart" [3]'
        results_page = "\n".join(
            [search_page, *(f'link "{name}" [{4 + i}]' for i, name in enumerate(results))]
        )
        item_page = f'heading "{item}" [1]\nbutton "Add to cart" [2]\nlink "Back" [3]'
        steps = [
            ("the search box is [1]", f'type(1, "{item}", submit=true)', search_page, "http://shop.test/"),
            (f"open {item}", f"click({4 + results.index(item)})", results_page, "http://shop.test/search"),
            ("add it to the cart", "click(2)", item_page, "http://shop.test/item"),
        ]
        previous: list[str] = []
        for index, (thought, action, axtree, url) in enumerate(steps):
            states.append(
                {
                    "state_id": f"{trajectory_id}:{index}",
                    "task_id": task_id,
                    "trajectory_id": trajectory_id,
                    "step_index": index,
                    "site": "shop",
                    "instruction": instruction,
                    "previous_actions": list(previous),
                    "url": url,
                    "axtree": axtree,
                    "screenshot": None,
                    "reference_thought": thought,
                    "reference_action": action,
                }
            )
            previous.append(action)
    return states


@pytest.fixture(scope="session")
def tiny_states() -> list[dict]:
    return make_states()


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory, tiny_states) -> Path:
    """A saved tiny Qwen3-VL checkpoint directory (default architecture, 512-token vocabulary)."""
    from rmsweb_kedro.contracts.prompts import PromptConfig, build_messages
    from rmsweb_kedro.models.modeling import build_tiny_model, save_checkpoint

    corpus = [
        part["text"]
        for state in tiny_states
        for message in build_messages(state, PromptConfig(), with_reference=True)[0]
        for part in message["content"]
    ]
    model, processor = build_tiny_model(corpus, {"vocab_size": 512})
    path = tmp_path_factory.mktemp("tiny_checkpoint") / "model"
    save_checkpoint(model, processor, path)
    return path


def draw_screenshot(path: Path, text: str, shade: int = 255) -> Path:
    """A 320x200 PNG with ``text`` drawn on a ``shade`` grey background (a stand-in for a page screenshot)."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (320, 200), (shade, shade, shade))
    ImageDraw.Draw(image).multiline_text((8, 8), text, fill=(0, 0, 0))
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path)
    return path


@pytest.fixture(scope="session")
def screenshot_states(tmp_path_factory, tiny_states) -> list[dict]:
    """12 states whose ``screenshot`` is a PNG of their page."""
    root = tmp_path_factory.mktemp("screenshots")
    return [
        dict(state, screenshot=str(draw_screenshot(root / f"{i}.png", state["axtree"])))
        for i, state in enumerate(tiny_states[:12])
    ]


@pytest.fixture(scope="session")
def released_checkpoint(tmp_path_factory, tiny_states) -> Path:
    """A tiny Qwen3-VL-Instruct checkpoint dir in the released layout (no generation markers in its template)."""
    from rmsweb_kedro.contracts.prompts import PromptConfig, build_messages
    from rmsweb_kedro.models.modeling import write_released_layout

    corpus = [
        part["text"]
        for state in tiny_states
        for message in build_messages(state, PromptConfig(), with_reference=True)[0]
        for part in message["content"]
    ]
    return write_released_layout(
        tmp_path_factory.mktemp("released") / "Qwen3-VL-tiny-Instruct", corpus, RELEASED_TINY
    )


@pytest.fixture(scope="session")
def lora_policy() -> tuple:
    """:func:`tests.salvage_ds.conftest.lora_tiny`, built in memory once a session (never changed in place)."""
    from tests.salvage_ds.conftest import lora_tiny

    return lora_tiny()
