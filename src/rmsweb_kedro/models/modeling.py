"""Qwen3-VL models: load any local Qwen3-VL-Instruct checkpoint, or build the tiny embedded default.

The same :func:`load_model` loads the tiny checkpoint that :func:`build_tiny_model` saves and a real
``Qwen3-VL-8B-Instruct`` directory. No torchvision is needed: the processor is the stock ``Qwen3VLProcessor`` with
no video processor and the PIL image processor (torchvision does not import beside the CPU torch build here).

Device and dtype are decided in one place, :func:`resolve_device` and :func:`resolve_dtype` (``"auto"``: this
process's accelerator, as Accelerate sees it, and bf16 there; the CPU and float32 otherwise). Every stage that runs
the policy (SFT's accuracy, mining, Salvage-DS, evaluation, live) gets its model from :func:`load_model` or
:func:`place_model`, which use them; the training loop's Accelerator puts the model on the same device.

One module because loading, building and saving a Qwen3-VL checkpoint and its packed-sequence forward are one
model's code, each relying on the others' layout (the released checkpoint's names, the processor, the rope
indices).
"""

from __future__ import annotations

import contextlib
import functools
import logging
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, model_validator

logger = logging.getLogger(__name__)

#: Qwen's special tokens, in Qwen's order, so ids and the chat template match the real models' conventions.
SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
]

#: Qwen's ``<|im_start|>`` chat template (images as ``<|vision_start|><|image_pad|><|vision_end|>``), with
#: ``{% generation %}`` around what the assistant writes (its text and ``<|im_end|>``) so the tokenizer can return
#: assistant masks for training.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message['content'] is string %}{%- set parts = [{'type': 'text', 'text': message['content']}] %}"
    "{%- else %}{%- set parts = message['content'] %}{%- endif %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['role'] == 'assistant' %}"
    "{%- generation %}"
    "{%- for part in parts %}{%- if part['type'] == 'text' %}{{- part['text'] }}{%- endif %}{%- endfor %}"
    "{{- '<|im_end|>' }}"
    "{%- endgeneration %}"
    "{%- else %}"
    "{%- for part in parts %}"
    "{%- if part['type'] == 'image' or 'image' in part %}{{- '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{%- elif part['type'] == 'text' %}{{- part['text'] }}{%- endif %}"
    "{%- endfor %}"
    "{{- '<|im_end|>' }}"
    "{%- endif %}"
    "{{- '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


#: The added tokens of the released Qwen3-VL tokenizers, in their order (ids 151643-151668 there, after the BPE
#: vocabulary); the released-layout builder appends them after its vocabulary the same way.
QWEN_ADDED_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<tool_call>",
    "</tool_call>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
]

#: The chat template in the shape Qwen3-VL-*-Instruct ship (system turn first, ``Picture n:`` / ``Video n:`` vision ids,
#: tool calls and tool responses) and, like them, WITHOUT ``{% generation %}`` markers: assistant masks cannot come
#: from the template (``training.sft.assistant_spans`` finds them by rendering).
RELEASED_CHAT_TEMPLATE = """\
{%- macro render(content, vision) -%}
{%- if content is string -%}{{- content -}}
{%- else -%}{%- for item in content -%}
{%- if vision and (item.type == 'image' or 'image' in item or 'image_url' in item) -%}
{%- set image_count.value = image_count.value + 1 -%}
{%- if add_vision_id %}Picture {{ image_count.value }}: {% endif -%}
<|vision_start|><|image_pad|><|vision_end|>
{%- elif vision and (item.type == 'video' or 'video' in item) -%}
{%- set video_count.value = video_count.value + 1 -%}
{%- if add_vision_id %}Video {{ video_count.value }}: {% endif -%}
<|vision_start|><|video_pad|><|vision_end|>
{%- elif 'text' in item -%}{{- item.text -}}
{%- endif -%}
{%- endfor -%}{%- endif -%}
{%- endmacro -%}
{%- set image_count = namespace(value=0) -%}
{%- set video_count = namespace(value=0) -%}
{%- if tools -%}
{{- '<|im_start|>system\\n' -}}
{%- if messages[0].role == 'system' -%}{{- render(messages[0].content, false) + '\\n\\n' -}}{%- endif -%}
{{- '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n' -}}
{{- 'You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' -}}
{%- for tool in tools -%}{{- '\\n' + (tool | tojson) -}}{%- endfor -%}
{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within ' -}}
{{- '<tool_call></tool_call> XML tags:\\n<tool_call>\\n{"name": <function-name>, "arguments": <args-json-object>}' -}}
{{- '\\n</tool_call><|im_end|>\\n' -}}
{%- elif messages[0].role == 'system' -%}
{{- '<|im_start|>system\\n' + render(messages[0].content, false) + '<|im_end|>\\n' -}}
{%- endif -%}
{%- for message in messages -%}
{%- if message.role == 'user' -%}
{{- '<|im_start|>user\\n' + render(message.content, true) + '<|im_end|>\\n' -}}
{%- elif message.role == 'assistant' -%}
{{- '<|im_start|>assistant\\n' + render(message.content, false) -}}
{%- for tool_call in message.tool_calls or [] -%}
{%- if (loop.first and message.content) or not loop.first -%}{{- '\\n' -}}{%- endif -%}
{%- set call = tool_call.function if tool_call.function else tool_call -%}
{{- '<tool_call>\\n{"name": "' + call.name + '", "arguments": ' -}}
{{- call.arguments if call.arguments is string else (call.arguments | tojson) -}}
{{- '}\\n</tool_call>' -}}
{%- endfor -%}
{{- '<|im_end|>\\n' -}}
{%- elif message.role == 'tool' -%}
{%- if loop.first or messages[loop.index0 - 1].role != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}
{{- '\\n<tool_response>\\n' + render(message.content, true) + '\\n</tool_response>' -}}
{%- if loop.last or messages[loop.index0 + 1].role != 'tool' -%}{{- '<|im_end|>\\n' -}}{%- endif -%}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}
"""

#: The released image processor: 16-pixel patches, 2x2 merge, 2 frames a temporal patch, pixel limits of
#: 256x256 to 4096x4096 (a 1280x800 screenshot is 50 x 80 patches, 1,000 visual tokens), mean/std 0.5.
RELEASED_IMAGE_PROCESSOR = {
    "patch_size": 16,
    "merge_size": 2,
    "temporal_patch_size": 2,
    "size": {"shortest_edge": 65_536, "longest_edge": 16_777_216},
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
}

#: The released sampling defaults (generation_config.json of Qwen3-VL-*-Instruct): the policy's samplers override
#: them with their own settings (top_k=0 etc.), and the released-layout checkpoint carries them to prove it.
RELEASED_GENERATION = {
    "do_sample": True,
    "temperature": 0.7,
    "top_p": 0.8,
    "top_k": 20,
    "repetition_penalty": 1.0,
}


def vision_token_ids(ids: dict[str, int]) -> dict[str, int]:
    """The config's ids of the tokens that frame an image or a video, from the tokenizer's ``token -> id``."""
    return {
        "image_token_id": ids["<|image_pad|>"],
        "video_token_id": ids["<|video_pad|>"],
        "vision_start_token_id": ids["<|vision_start|>"],
        "vision_end_token_id": ids["<|vision_end|>"],
    }


def released_layout_model(
    corpus_texts: list[str], config: ModelSizeConfig | dict[str, Any] | None = None, device: str = "cpu"
):
    """``(model, processor)``: a random Qwen3-VL-Instruct shaped like the released ones, built on ``device``:
    ``config`` with a vision tower with deepstack layers, M-RoPE and Qwen's token ids, a BPE tokenizer trained on
    ``corpus_texts`` with Qwen's added tokens after the vocabulary, the released chat template (no generation
    markers), image processor and generation defaults."""
    import torch
    from transformers import (
        GenerationConfig,
        Qwen2VLImageProcessorPil,
        Qwen3VLConfig,
        Qwen3VLForConditionalGeneration,
    )

    config = ModelSizeConfig.model_validate(config or {})
    tokenizer = train_tokenizer(corpus_texts, config.vocab_size, released_layout=True)
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in QWEN_ADDED_TOKENS}
    half = config.head_dim // 2  # the release's [24, 20, 20] for head_dim 128, scaled
    mrope = [half - 2 * (half * 5 // 16), half * 5 // 16, half * 5 // 16]
    model_config = Qwen3VLConfig(
        text_config={
            "vocab_size": config.vocab_rows or -(-len(tokenizer) // 64) * 64,  # padded, as the release's rows
            "hidden_size": config.hidden_size,
            "intermediate_size": config.intermediate_size,
            "num_hidden_layers": config.num_hidden_layers,
            "num_attention_heads": config.num_attention_heads,
            "num_key_value_heads": config.num_key_value_heads,
            "head_dim": config.head_dim,
            "hidden_act": "silu",
            "rms_norm_eps": 1e-6,
            "max_position_embeddings": 262_144,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 5_000_000.0,
                "mrope_section": mrope,
                "mrope_interleaved": True,
            },
            "bos_token_id": ids["<|endoftext|>"],
            "eos_token_id": ids["<|im_end|>"],
            "tie_word_embeddings": config.tie_word_embeddings,
        },
        vision_config={
            "depth": config.vision_depth,
            "hidden_size": config.vision_hidden_size,
            "intermediate_size": config.vision_intermediate_size,
            "num_heads": config.vision_heads,
            "hidden_act": "gelu_pytorch_tanh",
            "in_channels": 3,
            "patch_size": RELEASED_IMAGE_PROCESSOR["patch_size"],
            "spatial_merge_size": RELEASED_IMAGE_PROCESSOR["merge_size"],
            "temporal_patch_size": RELEASED_IMAGE_PROCESSOR["temporal_patch_size"],
            "out_hidden_size": config.hidden_size,
            "num_position_embeddings": 2304,
            "deepstack_visual_indexes": config.deepstack,
        },
        **vision_token_ids(ids),
        tie_word_embeddings=config.tie_word_embeddings,
    )
    torch.manual_seed(config.seed)
    with torch.device(device):
        model = Qwen3VLForConditionalGeneration(model_config)
    model.generation_config = GenerationConfig(
        bos_token_id=ids["<|endoftext|>"],
        pad_token_id=ids["<|endoftext|>"],
        eos_token_id=[ids["<|im_end|>"], ids["<|endoftext|>"]],
        **RELEASED_GENERATION,
    )
    forbid_vision_tokens(model)
    image_processor = Qwen2VLImageProcessorPil(**RELEASED_IMAGE_PROCESSOR)
    processor = processor_class()(
        image_processor=image_processor, tokenizer=tokenizer, chat_template=RELEASED_CHAT_TEMPLATE
    )
    return model, processor


def write_released_layout(
    path: str | Path, corpus_texts: list[str], config: ModelSizeConfig | dict[str, Any] | None = None
) -> Path:
    """Save :func:`released_layout_model` as a checkpoint dir (the template also as ``chat_template.json``, as
    the release ships it) and return its path."""
    import json

    model, processor = released_layout_model(corpus_texts, config)
    path = Path(path)
    save_checkpoint(model, processor, path)
    (path / "chat_template.json").write_text(json.dumps({"chat_template": RELEASED_CHAT_TEMPLATE}, indent=2))
    return path


class LoadedModel(NamedTuple):
    """A model and its processor, as the checkpoint dataset loads and saves them."""

    model: Any
    processor: Any


class ModelSizeConfig(BaseModel):
    """The sizes of a Qwen3-VL built from scratch: the embedded default (:func:`build_tiny_model`) or a random
    Qwen3-VL-Instruct in the released layout (:func:`released_layout_model`: the tests' fixture at tiny size,
    ``benchmarks/gpu_check.py`` at 2B). The defaults are the embedded default's: about 1.4M parameters at the full
    2048-token vocabulary (1.05M text with 4 layers, 0.38M vision); the default run uses 2 layers
    (conf/base/parameters_sft.yml ``tiny``)."""

    model_config = ConfigDict(extra="forbid")

    vocab_size: int = Field(
        default=2048,
        description="BPE vocabulary target: the tiny default's special tokens included; the released layout adds "
        "Qwen's added tokens after it",
    )
    vocab_rows: int | None = Field(
        default=None,
        description="released layout: embedding/LM-head rows (the release pads them, 151,936 rows for 151,669 "
        "tokens); None: the tokenizer's size (rounded up to 64 in the released layout)",
    )
    hidden_size: int = 128
    intermediate_size: int = 384
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 32
    tie_word_embeddings: bool = True
    vision_depth: int = 2
    vision_hidden_size: int = 64
    vision_intermediate_size: int = 128
    vision_heads: int = 2
    deepstack_visual_indexes: list[int] | None = Field(
        default=None, description="vision blocks whose features feed decoder layers 0, 1, ...; None: the last"
    )
    # The embedded default's own positions, RoPE and image processor; the released layout takes the release's
    # (262,144 positions, theta 5e6, RELEASED_IMAGE_PROCESSOR).
    max_position_embeddings: int = 2048
    rope_theta: float = 10000.0
    vision_patch_size: int = 16
    image_max_pixels: int = Field(default=128 * 128, description="screenshots are resized below this")
    seed: int = 0

    @property
    def deepstack(self) -> list[int]:
        """The deepstack vision blocks (:attr:`deepstack_visual_indexes`, or the last block)."""
        return (
            self.deepstack_visual_indexes
            if self.deepstack_visual_indexes is not None
            else [self.vision_depth - 1]
        )

    @model_validator(mode="after")
    def _deepstack_fits(self) -> ModelSizeConfig:
        # deepstack feature k is added to decoder layer k: more features than layers leave mergers unused
        if len(self.deepstack) > self.num_hidden_layers:
            raise ValueError(
                f"{len(self.deepstack)} deepstack layers need at least as many decoder layers "
                f"(num_hidden_layers={self.num_hidden_layers})"
            )
        if max(self.deepstack, default=0) >= self.vision_depth:
            raise ValueError(f"deepstack indexes {self.deepstack} must be < vision_depth")
        return self


class LoadConfig(BaseModel):
    """How to load a checkpoint directory (the tiny one or a real Qwen3-VL-Instruct)."""

    model_config = ConfigDict(extra="forbid")

    path: str
    dtype: str = "auto"  # auto (bf16 on an accelerator, float32 on the CPU), float32, bfloat16, float16
    device: str = "auto"  # auto (this process's accelerator, else the CPU), cpu, cuda, cuda:1, ...
    attn_implementation: str | None = "sdpa"  # sdpa, eager, flash_attention_2
    lora: LoraSettings | None = None


class LoraSettings(BaseModel):
    """Optional LoRA adapters (peft). The vision tower's attention is one fused ``qkv`` linear."""

    model_config = ConfigDict(extra="forbid")

    r: int = 16
    alpha: int = 32
    dropout: float = 0.05
    # Language-model projections by default; add "qkv" (and "proj") to adapt the vision tower too.
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )


LoadConfig.model_rebuild()


@functools.cache
def processor_class():
    """Qwen3VLProcessor without a video processor (the stock one needs torchvision for videos)."""
    from transformers import Qwen3VLProcessor

    class Qwen3VLImageProcessor(Qwen3VLProcessor):
        # ProcessorMixin takes its sub-processors from this signature: no video_processor here.
        def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
            super().__init__(image_processor, tokenizer, None, chat_template=chat_template, **kwargs)

    return Qwen3VLImageProcessor


def load_processor(path: str | Path):
    """The processor of a checkpoint dir: its tokenizer (and chat template) and a PIL image processor."""
    from transformers import AutoTokenizer, Qwen2VLImageProcessorPil

    tokenizer = AutoTokenizer.from_pretrained(path)
    image_processor = Qwen2VLImageProcessorPil.from_pretrained(path)
    return processor_class()(
        image_processor=image_processor, tokenizer=tokenizer, chat_template=tokenizer.chat_template
    )


def resolve_device(device: str = "auto"):
    """The ``torch.device`` the policy runs on: THE one place that decides it.

    ``"auto"``: this process's accelerator as Accelerate sees it (``cuda:<LOCAL_RANK>`` under ``accelerate launch``
    or torchrun, ``cuda:0`` in a plain process, MPS/XPU where those are the accelerator), else the CPU; it is the
    device ``Accelerator().device`` trains on. Anything else is a torch device string (``"cpu"``, ``"cuda:1"``)."""
    import torch

    if device != "auto":
        return torch.device(device)
    from accelerate import PartialState

    return PartialState(cpu=cpu_only()).device


def cpu_only() -> bool:
    """True on a machine without an accelerator. Accelerate must then be told (``cpu=True``): processes started by
    ``accelerate launch`` or torchrun otherwise each run alone (``DistributedType.NO``) instead of joining one gloo
    process group."""
    import torch

    xpu = getattr(torch, "xpu", None)
    return not (
        torch.cuda.is_available()
        or (xpu is not None and xpu.is_available())
        or torch.backends.mps.is_available()
    )


def resolve_dtype(dtype: str = "auto", device: str = "auto"):
    """The ``torch.dtype`` of the policy's weights: ``"auto"`` is bfloat16 on an accelerator that supports it and
    float32 on the CPU (bf16 on a CPU without bf16 instructions is emulated; models/numerics.py)."""
    import torch

    if dtype != "auto":
        return getattr(torch, dtype)
    placed = resolve_device(device)
    if placed.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.bfloat16 if placed.type in ("xpu", "npu") else torch.float32


def training_dtype(path: str | Path) -> str:
    """The dtype to load a checkpoint in for training: float32 master weights when its own weights are trained
    (the loop's ``mixed_precision: bf16`` computes in bf16; AdamW updates of ~1e-5 x w vanish in bf16 weights), the
    ``auto`` dtype for a LoRA policy, whose base is frozen and whose adapter peft keeps in float32."""
    return "auto" if Path(path, ADAPTER_DIR).is_dir() else "float32"


def place_model(model, device: str = "auto", dtype: str | None = None):
    """``model`` moved to :func:`resolve_device` (and cast to :func:`resolve_dtype` when ``dtype`` is given)."""
    model = model.to(resolve_device(device))
    return model if dtype is None else model.to(resolve_dtype(dtype, device))


def load_model(config: LoadConfig | dict[str, Any]):
    """``(model, processor)`` from a local checkpoint dir, on :func:`resolve_device` in :func:`resolve_dtype`;
    LoRA adapters added when ``config.lora`` is set (or kept, when the dir is a saved base + adapter)."""
    from transformers import Qwen3VLForConditionalGeneration

    config = LoadConfig.model_validate(config)
    if not Path(config.path, "config.json").exists():
        raise FileNotFoundError(f"{config.path}: not a Hugging Face checkpoint directory (no config.json)")
    kwargs: dict[str, Any] = {"dtype": resolve_dtype(config.dtype, config.device)}
    if config.attn_implementation:
        kwargs["attn_implementation"] = config.attn_implementation
    model = Qwen3VLForConditionalGeneration.from_pretrained(config.path, **kwargs)
    forbid_vision_tokens(model)
    adapter = Path(config.path, ADAPTER_DIR)
    if adapter.is_dir():  # a LoRA policy saved as base + adapter: keep training the adapter
        from peft import PeftModel

        if config.lora is not None:
            raise ValueError(
                f"{config.path} holds a LoRA adapter already ({adapter}): drop `lora` from its load config"
            )
        model = PeftModel.from_pretrained(model, adapter, is_trainable=True)
    elif config.lora is not None:
        model = add_lora(model, config.lora)
    return place_model(model, config.device), load_processor(config.path)


def forbid_vision_tokens(model) -> None:
    """Never sample the vision placeholders (``<|image_pad|>`` ...): a reply holding one would be taken for an image
    slot by every later forward with images (Salvage-DS's training forward fails on the count mismatch)."""
    config = model.config
    ids = [
        config.image_token_id,
        config.video_token_id,
        config.vision_start_token_id,
        config.vision_end_token_id,
    ]
    model.generation_config.suppress_tokens = sorted({int(i) for i in ids if i is not None})


def add_lora(model, settings: LoraSettings):
    """Wrap ``model`` with peft LoRA adapters on ``settings.target_modules``."""
    from peft import LoraConfig, get_peft_model

    lora = LoraConfig(
        r=settings.r,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=settings.target_modules,
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, lora)


def train_tokenizer(corpus_texts: list[str], vocab_size: int, released_layout: bool = False):
    """A byte-level BPE tokenizer trained on ``corpus_texts``, wrapped with Qwen's specials and chat template.

    The tiny default puts its 7 specials first and uses :data:`CHAT_TEMPLATE` (with generation markers);
    ``released_layout`` appends all of :data:`QWEN_ADDED_TOKENS` after the vocabulary, pads on the right and uses
    :data:`RELEASED_CHAT_TEMPLATE` (no markers), as the released tokenizers do."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from rmsweb_kedro.contracts.prompts import action_space_text

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[] if released_layout else SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    # The action space text is in every prompt; training on it gives its words single tokens.
    tokenizer.train_from_iterator([action_space_text(), *corpus_texts], trainer=trainer)
    if released_layout:
        tokenizer.add_special_tokens(QWEN_ADDED_TOKENS)  # ids in the release's order, after the vocabulary
        return PreTrainedTokenizerFast(
            tokenizer_object=tokenizer,
            eos_token="<|im_end|>",
            pad_token="<|endoftext|>",
            additional_special_tokens=QWEN_ADDED_TOKENS,
            chat_template=RELEASED_CHAT_TEMPLATE,
            model_max_length=262_144,
        )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=SPECIAL_TOKENS[1:],
        chat_template=CHAT_TEMPLATE,
        padding_side="left",
        model_max_length=4096,
    )
    return fast


def build_tiny_model(corpus_texts: list[str], config: ModelSizeConfig | dict[str, Any] | None = None):
    """A tiny Qwen3-VL with a locally trained tokenizer: ``(model, processor)``; save both with ``save_pretrained``."""
    import torch
    from transformers import Qwen2VLImageProcessorPil, Qwen3VLConfig, Qwen3VLForConditionalGeneration

    config = ModelSizeConfig.model_validate(config or {})
    tokenizer = train_tokenizer(corpus_texts, config.vocab_size)
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in SPECIAL_TOKENS}
    half = config.head_dim // 2  # mrope sections (t, h, w) must sum to head_dim / 2
    mrope = [half - 2 * (half // 4), half // 4, half // 4]
    model_config = Qwen3VLConfig(
        text_config={
            "vocab_size": config.vocab_rows or len(tokenizer),
            "hidden_size": config.hidden_size,
            "intermediate_size": config.intermediate_size,
            "num_hidden_layers": config.num_hidden_layers,
            "num_attention_heads": config.num_attention_heads,
            "num_key_value_heads": config.num_key_value_heads,
            "head_dim": config.head_dim,
            "max_position_embeddings": config.max_position_embeddings,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": config.rope_theta,
                "mrope_section": mrope,
                "mrope_interleaved": True,
            },
            "pad_token_id": ids["<|endoftext|>"],
            "tie_word_embeddings": config.tie_word_embeddings,
        },
        vision_config={
            "depth": config.vision_depth,
            "hidden_size": config.vision_hidden_size,
            "intermediate_size": config.vision_intermediate_size,
            "num_heads": config.vision_heads,
            "patch_size": config.vision_patch_size,
            "out_hidden_size": config.hidden_size,
            "num_position_embeddings": 256,
            "deepstack_visual_indexes": config.deepstack,
        },
        **vision_token_ids(ids),
        tie_word_embeddings=config.tie_word_embeddings,
    )
    model_config.bos_token_id = None
    model_config.eos_token_id = ids["<|im_end|>"]
    model_config.pad_token_id = ids["<|endoftext|>"]
    torch.manual_seed(config.seed)
    model = Qwen3VLForConditionalGeneration(model_config)
    model.generation_config.eos_token_id = [ids["<|im_end|>"], ids["<|endoftext|>"]]
    model.generation_config.pad_token_id = ids["<|endoftext|>"]
    model.generation_config.bos_token_id = None
    forbid_vision_tokens(model)
    image_processor = Qwen2VLImageProcessorPil(
        patch_size=config.vision_patch_size,
        merge_size=2,
        temporal_patch_size=2,
        min_pixels=(config.vision_patch_size * 2) ** 2,
        max_pixels=config.image_max_pixels,
    )
    processor = processor_class()(
        image_processor=image_processor, tokenizer=tokenizer, chat_template=CHAT_TEMPLATE
    )
    n_params = sum(p.numel() for p in model.parameters())
    logger.info("built a tiny Qwen3-VL: %.2fM parameters, vocabulary %d", n_params / 1e6, len(tokenizer))
    return model, processor


#: Where a LoRA policy's adapter lives inside its checkpoint dir (the base weights are the dir itself).
ADAPTER_DIR = "adapter"


def save_checkpoint(model, processor, path: str | Path, state_dict: dict | None = None) -> None:
    """Save a Hugging Face checkpoint dir (model, tokenizer with chat template, image processor).

    A peft (LoRA) model is saved as base + adapter: its base weights, unmerged, as the ordinary checkpoint and the
    adapter in ``<path>/adapter``, so :func:`load_model` gives the same policy back with the adapter trainable (SFT's
    adapter goes on training in Salvage-DS) and the base still there (``disable_adapter()`` is the frozen
    reference). Plain ``from_pretrained(path)`` loads the base alone; add the adapter with
    ``peft.PeftModel.from_pretrained(base, path / "adapter")``. ``state_dict``: the full weights when they were
    gathered from shards (FSDP, ZeRO-3).
    """
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    if hasattr(model, "peft_config"):
        state_dict = model.state_dict() if state_dict is None else state_dict
        base = {  # peft's keys without its wrapper prefix and layer indirection, LoRA weights left out
            key.removeprefix("base_model.model.").replace(".base_layer.", "."): value
            for key, value in state_dict.items()
            if "lora_" not in key
        }
        model.get_base_model().save_pretrained(path, state_dict=base)
        model.save_pretrained(path / ADAPTER_DIR, state_dict=state_dict)
    else:
        model.save_pretrained(path, state_dict=state_dict)
    processor.tokenizer.save_pretrained(path)
    processor.image_processor.save_pretrained(path)


#: The attention a packed forward runs where the model asks for ``sdpa`` (:func:`packed_attention`).
PACKED_SDPA = "sdpa_packed"


@functools.cache
def register_packed_sdpa() -> str:
    """Register :data:`PACKED_SDPA` with transformers and return its name: the samples of a packed row attended in
    one causal ``sdpa`` call, each sample a row of its own (right-padded inside the attention only: causality keeps a
    sample's queries off the padding after it); every other forward (padding masks, generation) is plain ``sdpa``.

    Why: given packed ``position_ids`` (text positions restarting at 0 per sample) and no attention mask,
    transformers 5.24 (``masking_utils.find_packed_sequence_indices``) makes ``sdpa``/``eager`` attend through a
    dense block-diagonal mask over the whole row, whose cost grows with the square of the row (16 samples of 200
    tokens: 16x the work of the samples alone), and one call a sample is many small kernels (on 2 CPU cores ~1.6x
    the time of the one call, fwd + bwd); ``flash_attention_2`` reads the same positions as varlen and needs nothing
    from here. Samples are found where the text position does not follow its predecessor by 1."""
    import torch
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import sdpa_mask

    def mask(*args, attention_mask=None, **kwargs):
        # no padding mask: causality (and the samples of a packed row) are the attention's own business
        return None if attention_mask is None else sdpa_mask(*args, attention_mask=attention_mask, **kwargs)

    def attention(module, query, key, value, attention_mask, **kwargs):
        positions = kwargs.get("position_ids")
        length = query.shape[2]
        if (
            attention_mask is None
            and positions is not None
            and query.shape[0] == 1
            and key.shape[2] == length > 1
        ):
            starts = torch.diff(positions.reshape(-1)) != 1
            if starts.any():
                bounds = [0, *(starts.nonzero().flatten() + 1).tolist(), length]
                sizes = [b - a for a, b in zip(bounds, bounds[1:], strict=False)]
                longest = max(sizes)
                # token t of sample i sits at row i, column t of a (samples, longest) grid
                slots = torch.cat([torch.arange(n) + i * longest for i, n in enumerate(sizes)]).to(
                    query.device
                )

                def grid(x):  # (1, heads, tokens, dim) -> (samples, heads, longest, dim), right-padded
                    flat = x[0].transpose(0, 1)
                    rows = flat.new_zeros(len(sizes) * longest, *flat.shape[1:]).index_copy(0, slots, flat)
                    return rows.view(len(sizes), longest, *flat.shape[1:]).transpose(1, 2)

                out, _ = sdpa_attention_forward(module, grid(query), grid(key), grid(value), None, **kwargs)
                return out.reshape(-1, *out.shape[2:]).index_select(0, slots)[
                    None
                ], None  # (1, tokens, heads, dim)
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)

    AttentionInterface.register(PACKED_SDPA, attention)
    AttentionMaskInterface.register(PACKED_SDPA, mask)
    return PACKED_SDPA


@contextlib.contextmanager
def packed_attention(model):
    """Within the block, the language model's ``sdpa`` attention is :data:`PACKED_SDPA` (exact, within each sample,
    for packed rows; plain ``sdpa`` otherwise); other implementations (``flash_attention_2``: varlen from the packed
    positions; ``eager``: transformers' block-diagonal mask) are left as they are."""
    text = model.config.text_config
    if text._attn_implementation != "sdpa":
        yield model
        return
    model.set_attn_implementation({"text_config": register_packed_sdpa()})
    try:
        yield model
    finally:
        model.set_attn_implementation({"text_config": "sdpa"})


def rope_index(model):
    """Qwen3-VL's ``get_rope_index`` of ``model`` (plain or peft): the 3-D (time, height, width) rope positions of a
    padded batch, as the model's own forward computes them (it needs no weights: callable on CPU tensors)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return base.model.get_rope_index
