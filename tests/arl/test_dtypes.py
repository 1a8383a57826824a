"""`auto` dtypes: bfloat16 only where the CPU has bf16 arithmetic torch can use."""

from __future__ import annotations

import platform

import pytest

from arl import dtypes


@pytest.fixture
def cpuinfo(tmp_path):
    def write(flags: str) -> str:
        path = tmp_path / f"cpuinfo-{abs(hash(flags))}"
        path.write_text(f"processor\t: 0\nflags\t\t: {flags}\n")
        return str(path)
    yield write
    dtypes.cpu_has_native_bf16.cache_clear()


@pytest.mark.skipif(platform.machine() != "x86_64", reason="x86 flags")
def test_bf16_flags_mean_native_bf16_unless_onednn_is_capped_below_them(cpuinfo, monkeypatch):
    amx = cpuinfo("fpu sse4_2 avx2 avx512f avx512_bf16 amx_bf16 amx_tile")
    plain = cpuinfo("fpu sse4_2 avx2 avx512f")
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    monkeypatch.delenv("DNNL_MAX_CPU_ISA", raising=False)
    assert dtypes.cpu_has_native_bf16(amx) and not dtypes.cpu_has_native_bf16(plain)
    for cap, native in (("AVX2", False), ("AVX512_CORE", False), ("AVX512_CORE_BF16", True),
                        ("AVX512_CORE_AMX", True)):
        dtypes.cpu_has_native_bf16.cache_clear()
        monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", cap)
        assert dtypes.cpu_has_native_bf16(amx) is native, cap
    dtypes.cpu_has_native_bf16.cache_clear()
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA")
    monkeypatch.setenv("DNNL_MAX_CPU_ISA", "avx2")  # the old name, any case
    assert not dtypes.cpu_has_native_bf16(amx)


def test_no_shipped_config_forces_emulated_bf16_on_a_cpu(monkeypatch):
    """On a CPU without bf16 instructions a forced bfloat16 trains ~10x slower: every config
    arl ships says `auto` where it runs on a CPU, and `arl train` warns about one that does not."""
    import glob

    from arl.app.train import emulated_bf16
    from arl.config import load_config

    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")  # no bf16 kernels on any x86 CPU
    dtypes.cpu_has_native_bf16.cache_clear()
    try:
        for path in sorted(glob.glob("configs/*.yaml")):
            assert emulated_bf16(load_config([path], check_paths=False)) == [], path
        forced = load_config(["configs/tictactoe_move.yaml"], ["model.dtype=bfloat16",
                             "learner.compute.dtype=bfloat16"], check_paths=False)
        lines = emulated_bf16(forced)
        assert [line.split("=")[0] for line in lines] == ["model.dtype", "learner.compute.dtype"]
    finally:
        dtypes.cpu_has_native_bf16.cache_clear()
