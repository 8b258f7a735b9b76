"""How the project computes on a CPU: which kernels run and in which precision, decided here and nowhere else.

**Kernels.** A CPU's instruction sets choose the kernels torch runs: ATen's vectorised ops (softmax, norms,
element-wise maths, reductions) are compiled for AVX2 and AVX-512 and pick the widest the CPU has; MKL's GEMMs and
oneDNN's primitives pick their code path at run time. Different kernels add in different orders, so a default run on
an AVX-512 machine and one on an AVX2 machine part after the first optimizer step. :func:`pin_cpu_kernels` (called
when the package is imported, before torch is) pins all three to their AVX2 code paths on every x86-64 CPU with
AVX2: ``ATEN_CPU_CAPABILITY=avx2``, ``ONEDNN_MAX_CPU_ISA=AVX2`` and ``MKL_CBWR=AVX2,STRICT`` (MKL's conditional
numerical reproducibility; ``STRICT`` keeps the bits on 1 or 2 threads, which plain ``AVX2`` does not). So every
Intel machine with AVX2 computes what an AVX2-only one does, bit for bit (docs/training.md, "Numerics on the CPU",
has the measurements). MKL promises its AVX2 branch on Intel CPUs only: on AMD CPUs it runs its ``AUTO`` branch
instead, so AMD machines may compute other bits (not measured: no AMD CPU here). MKL's vendor-neutral branch
(``MKL_CBWR=COMPATIBLE,STRICT``, set it yourself) took 1.85x the SFT time here and gave other bits on 1 and 2
threads, so it is not the default. oneDNN is capped with ATen because ATen at AVX2 beside an uncapped oneDNN fails
bf16 attention on AMX CPUs (``pack_vnni2 is only supported when avx512 is supported``). A variable the user already
set wins, and ``RMSWEB_CPU_KERNELS=native`` leaves the kernels as torch picks them: other bits, and bf16 at the speed
of a CPU's bf16 instructions (``avx512_bf16``, AMX), which the portable kernels emulate.

**Precision.** ``mixed_precision`` (the training loop's Accelerate setting) takes what a user types: ``no``
(YAML's ``no`` is the boolean false, accepted too), ``fp32`` (= ``no``), ``bf16``, ``fp16`` or ``auto``;
:func:`resolve_mixed_precision` turns ``auto`` into bf16 on an accelerator that has it and ``no`` on every CPU. On a
CPU without bf16 instructions (AVX2 machines, most laptops) autocast to bf16 is emulated and 3.6-4.5x slower than
fp32, and a CPU with them (``avx512_bf16``, AMX) would compute other bits than one without; so the embedded
default trains in fp32 on every CPU; bf16 on a CPU stays a choice (``mixed_precision: bf16``, with
``RMSWEB_CPU_KERNELS=native`` where the CPU has bf16 instructions).
"""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path
from typing import Any

#: The kernel pins of the portable setting (x86-64 with AVX2): variable -> value.
PORTABLE_KERNELS = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_CBWR": "AVX2,STRICT"}
#: ``portable`` (default) or ``native``.
KERNELS_ENV = "RMSWEB_CPU_KERNELS"
#: What users type for "no mixed precision" (``False``: YAML 1.1 reads an unquoted ``no`` as a boolean).
_FP32 = {"no", "fp32", "float32", "none", "false"}
MIXED_PRECISIONS = ("no", "bf16", "fp16", "auto")


def cpu_model() -> tuple[str | None, list[str]]:
    """The CPU's model name and its SIMD instruction sets (``avx2``, ``avx512_bf16``, ``amx_tile``, ...) from
    ``/proc/cpuinfo``; ``(platform.processor() or None, [])`` where that file is absent (not Linux)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or None, []
    model = re.search(r"^model name\s*:\s*(.+)$", text, re.MULTILINE)
    flags = re.search(r"^flags\s*:\s*(.+)$", text, re.MULTILINE)
    # a hypervisor may name only the brand ("AMD EPYC"): family/model/stepping tell the generations apart
    numbers = [
        re.search(rf"^{key}\s*:\s*(\d+)$", text, re.MULTILINE) for key in ("cpu family", "model", "stepping")
    ]
    name = model.group(1).strip() if model else None
    if name and all(numbers):
        name += " (family {}, model {}, stepping {})".format(*(n.group(1) for n in numbers))
    simd = re.compile(r"^(sse|ssse|avx|amx|fma|f16c)")  # the sets that decide which kernels BLAS/oneDNN run
    return (
        name,
        sorted(f for f in (flags.group(1).split() if flags else []) if simd.match(f)),
    )


#: Environment variables that change which CPU kernels run, hence the bits a run computes.
KERNEL_ENV = (
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY", "RMSWEB_CPU_KERNELS"
)  # fmt: skip


def kernel_choice() -> str:
    """``portable`` (AVX2 kernels pinned) or ``native`` (``RMSWEB_CPU_KERNELS=native``, or a CPU that is not
    x86-64 with AVX2: ARM and Apple silicon run their own kernels, other bits)."""
    if os.environ.get(KERNELS_ENV, "portable") == "native":
        return "native"
    if platform.machine().lower() not in ("x86_64", "amd64") or "avx2" not in cpu_model()[1]:
        return "native"
    return "portable"


def pin_cpu_kernels() -> dict[str, str]:
    """Set the portable kernel pins in this process's environment (children inherit them), unless the user set
    them or chose ``native``; returns the pins in force. Must run before torch computes anything: ATen reads its
    capability, and MKL its code path, once."""
    if os.environ.get(KERNELS_ENV, "portable") not in ("portable", "native"):
        raise ValueError(
            f"{KERNELS_ENV}={os.environ[KERNELS_ENV]!r}: expected 'portable' (the default: AVX2 kernels on every "
            "x86-64 CPU, the same bits everywhere) or 'native' (torch's own choice)"
        )
    if kernel_choice() == "portable":
        for name, value in PORTABLE_KERNELS.items():
            os.environ.setdefault(name, value)
    return {name: os.environ[name] for name in PORTABLE_KERNELS if name in os.environ}


def normalise_mixed_precision(value: Any) -> str:
    """``no``/``fp32``/``False`` -> ``"no"``; ``bf16``, ``fp16``, ``auto`` as they are; anything else an error."""
    text = str(value).strip().lower()
    if value is False or text in _FP32:
        return "no"
    if text in MIXED_PRECISIONS:
        return text
    raise ValueError(
        f"mixed_precision {value!r}: expected one of no (or fp32), bf16, fp16, auto (bf16 on an accelerator, "
        "fp32 on a CPU)"
    )


def resolve_mixed_precision(value: str) -> str:
    """The Accelerate ``mixed_precision`` to run: ``auto`` is ``bf16`` on a CUDA GPU with bf16 (or an XPU) and
    ``no`` on the CPU (see the module docstring); any other value as :func:`normalise_mixed_precision` gives it."""
    value = normalise_mixed_precision(value)
    if value != "auto":
        return value
    from rmsweb_kedro.models.modeling import cpu_only

    if cpu_only():
        return "no"
    import torch

    if torch.cuda.is_available():
        return "bf16" if torch.cuda.is_bf16_supported() else "no"
    return "bf16" if getattr(torch, "xpu", None) is not None and torch.xpu.is_available() else "no"


def numerics_record() -> dict[str, Any]:
    """What the run manifest records of this module's choices: the kernel setting and its pins, and what
    ``mixed_precision: auto`` means on this machine."""
    return {
        "cpu_kernels": kernel_choice(),
        "kernel_pins": {name: os.environ[name] for name in PORTABLE_KERNELS if name in os.environ},
        "mixed_precision_auto": resolve_mixed_precision("auto"),
    }
