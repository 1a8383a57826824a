"""Compute dtypes: the choices every dtype key accepts, and what `auto` means on a machine.

bfloat16 halves memory and, where the hardware has bf16 arithmetic, runs matrix products
several times faster than float32. Where it has none, torch emulates it: on a 2-core AVX2
CPU (no AVX512-BF16) a 512x512 bf16 matmul ran at 1.0 GFLOPS against 71 in float32, so a
run configured for bf16 was about 70x slower. `auto` therefore picks bfloat16 on a GPU that
supports it and on a CPU with native bf16 instructions, and float32 everywhere else.

Pure Python (no torch): the config schema reads the choices, and each process resolves
`auto` for the device it runs on (a rollout worker and a learner may sit on different
machines).
"""

from __future__ import annotations

import functools
import os
import platform

DTYPES = ("auto", "bfloat16", "float32")
BYTES = {"bfloat16": 2, "float32": 4}  # per element, of each concrete dtype
# CPU feature flags (/proc/cpuinfo) that mean native bf16 arithmetic.
_X86_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})
_ARM_BF16_FLAGS = frozenset({"bf16"})
CPUINFO = "/proc/cpuinfo"


def cpu_flags(cpuinfo: str = CPUINFO) -> frozenset[str]:
    """The feature flags of the first CPU ("flags" on x86, "Features" on ARM); empty where
    the file does not exist (macOS, Windows)."""
    try:
        with open(cpuinfo, encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip().lower() in ("flags", "features"):
                    return frozenset(value.split())
    except OSError:
        pass
    return frozenset()


# oneDNN's instruction-set caps (ONEDNN_MAX_CPU_ISA) that leave no bf16 kernels: torch's
# bf16 matmul then falls back to emulation (AVX2: 2.1 GFLOPS against 142 in float32 on a
# CPU with AMX; AVX512_CORE: 34 against 140).
_ISA_WITHOUT_BF16 = frozenset({"sse41", "avx", "avx2", "avx2_vnni", "avx2_vnni_2",
                               "avx512_core", "avx512_core_vnni"})


def onednn_isa_cap() -> str:
    """The instruction set oneDNN is capped at (ONEDNN_MAX_CPU_ISA, or its old name
    DNNL_MAX_CPU_ISA), lower case; "" when uncapped."""
    return (os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA")
            or "").strip().lower()


@functools.lru_cache(maxsize=None)
def cpu_has_native_bf16(cpuinfo: str = CPUINFO) -> bool:
    """Whether this machine's CPU has bf16 arithmetic instructions that torch may use (not
    where oneDNN is capped below them)."""
    if onednn_isa_cap() in _ISA_WITHOUT_BF16:
        return False
    flags = cpu_flags(cpuinfo)
    if platform.machine().lower() in ("arm64", "aarch64"):
        # Apple silicon has no /proc/cpuinfo; M2 and later do bf16, and torch uses it.
        return bool(flags & _ARM_BF16_FLAGS) or platform.system() == "Darwin"
    return bool(flags & _X86_BF16_FLAGS)


def resolve(dtype: str, on_gpu: bool = False, gpu_bf16: bool = True) -> str:
    """`dtype` with `auto` replaced by what is fast here: bfloat16 on a GPU (if `gpu_bf16`,
    i.e. it supports bf16) or a bf16-native CPU, float32 otherwise. Raises ValueError for a
    name outside DTYPES."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {list(DTYPES)}, got {dtype!r}")
    if dtype != "auto":
        return dtype
    if on_gpu:
        return "bfloat16" if gpu_bf16 else "float32"
    return "bfloat16" if cpu_has_native_bf16() else "float32"
