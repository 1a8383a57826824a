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
