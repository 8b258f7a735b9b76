"""The default's numerics on the CPU (models/numerics.py): ``mixed_precision`` takes what users type, ``auto`` is fp32 on
a CPU, the run manifest records the choice, and a short SFT saves the same checkpoint bytes with the project's
kernels as with an AVX2 machine's (stood in for by capping ATen, oneDNN and MKL at AVX2) and on 1 or 2 threads."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rmsweb_kedro.models.numerics import (
    PORTABLE_KERNELS,
    cpu_model,
    normalise_mixed_precision,
    resolve_mixed_precision,
)
from rmsweb_kedro.training.loop import LoopConfig

ROOT = Path(__file__).resolve().parents[2]
#: What an AVX2-only machine runs, on an x86-64 CPU with AVX-512 (DESIGN.md: the stand-in for AMD Zen 3 here),
#: written out rather than imported: the project's pins are what this test checks.
AVX2_STAND_IN = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_CBWR": "AVX2,STRICT"}


@pytest.mark.parametrize(
    ("typed", "expected"),
    [(False, "no"), ("no", "no"), ("fp32", "no"), ("float32", "no"), ("BF16", "bf16"), ("fp16", "fp16"),
     ("auto", "auto")],
)  # fmt: skip
def test_mixed_precision_takes_what_users_type(typed, expected):
    assert LoopConfig(output_dir="x", mixed_precision=typed).mixed_precision == expected


def test_an_unknown_precision_names_the_choices():
    with pytest.raises(ValueError, match=r"mixed_precision 'int8': expected one of no \(or fp32\), bf16"):
        LoopConfig(output_dir="x", mixed_precision="int8")


def test_no_on_the_command_line_turns_autocast_off():
    """``--params sft.training.loop.mixed_precision=no``: Kedro reads the value as YAML, i.e. the boolean false,
    which the parameters model used to refuse."""
    from kedro.framework.cli.utils import _split_params

    params = _split_params(None, None, "sft.training.loop.mixed_precision=no")
    typed = params["sft"]["training"]["loop"]["mixed_precision"]
    assert typed is False
    assert normalise_mixed_precision(typed) == "no"


def test_auto_is_fp32_on_the_cpu_and_the_manifest_says_so():
    from rmsweb_kedro.runs.provenance import hardware

    assert resolve_mixed_precision("auto") == "no"  # this suite runs without an accelerator
    numerics = hardware()["numerics"]
    assert numerics["mixed_precision_auto"] == "no"
    assert numerics["cpu_kernels"] == ("portable" if "avx2" in cpu_model()[1] else "native")
    if numerics["cpu_kernels"] == "portable" and os.environ.get("RMSWEB_CPU_KERNELS") != "native":
        assert numerics["kernel_pins"] == {k: os.environ[k] for k in PORTABLE_KERNELS}


def _short_sft(checkpoint: Path, out: Path, env: dict[str, str], threads: int) -> dict:
    clean = {k: v for k, v in os.environ.items() if k not in {*AVX2_STAND_IN, "RMSWEB_CPU_KERNELS"}}
    done = subprocess.run(
        [sys.executable, "-m", "tests.sft.short_sft", str(checkpoint), str(out), str(threads)],
        cwd=ROOT, env={**clean, "TOKENIZERS_PARALLELISM": "false", **env}, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))[7:])


@pytest.mark.slow
def test_a_short_sft_saves_the_same_bytes_on_every_cpu_kind(tmp_path, tiny_checkpoint):
    """The project's default (portable kernels, fp32) on this machine, on 1 and 2 threads, and under the AVX2
    stand-in set by hand: one checkpoint hash. On a CPU with AVX-512, torch's own kernels
    (``RMSWEB_CPU_KERNELS=native``) give other bytes: that is what the pins are for, and it shows the comparison
    can fail."""
    x86_avx2 = "avx2" in cpu_model()[1]
    if not x86_avx2:
        pytest.skip(
            "the pins are for x86-64 CPUs with AVX2; this CPU runs its own kernels (README: which figures move)"
        )
    default = _short_sft(tiny_checkpoint, tmp_path / "default", {}, 2)
    one_thread = _short_sft(tiny_checkpoint, tmp_path / "one_thread", {}, 1)
    avx2 = _short_sft(tiny_checkpoint, tmp_path / "avx2", AVX2_STAND_IN, 2)
    assert avx2["capability"] == default["capability"] == "AVX2"
    assert default["sha256"] == one_thread["sha256"] == avx2["sha256"]
    if "avx512f" in cpu_model()[1]:
        native = _short_sft(tiny_checkpoint, tmp_path / "native", {"RMSWEB_CPU_KERNELS": "native"}, 2)
        assert native["capability"] != "AVX2"
        assert native["sha256"] != avx2["sha256"]
