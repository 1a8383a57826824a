"""The documentation stays true: the README is short and its links resolve; the generated
pages are what the code generates; the config reference covers every key and the metrics
glossary every key a run of the demo's config writes; no file cites a missing document."""

from __future__ import annotations

import json
import pathlib
import re

import numpy as np
import pytest
import yaml

from arl.actors.hosts import LocalHost
from arl.app.reference import generated
from arl.app.train import train
from arl.config import EnvConfig, keys, load_config
from arl.env_spec import registered_names, resolve_env
from arl.metric_names import GLOSSARY, glossary_entry

ROOT = pathlib.Path(__file__).resolve().parents[2]
LINK = re.compile(r"\]\(([^)#\s]+)(#[^)]*)?\)")


def test_readme_is_short_and_every_link_resolves():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 300
    links = [m.group(1) for m in LINK.finditer(readme) if "://" not in m.group(1)]
    assert "docs/environments.md" in links and "docs/scale-out.md" in links  # two clicks
    assert [link for link in links if not (ROOT / link).exists()] == []


def test_generated_pages_are_committed_as_generated():
    for name, text in generated().items():
        committed = (ROOT / "docs" / "reference" / name).read_text()
        assert committed == text, f"docs/reference/{name} is stale: run `make docs-pages`"


def test_the_config_reference_covers_every_key_of_every_env():
    page = (ROOT / "docs" / "reference" / "config.md").read_text()
    wanted = set(keys(env=EnvConfig))
    for name in registered_names():
        wanted |= set(keys(env=resolve_env(name).config))
    assert sorted(k for k in wanted if f"| `{k}` |" not in page) == []


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory, warm_model_dir):
    """The demo's config for 2 short steps in-process, evaluating on the last one."""
    out = tmp_path_factory.mktemp("runs")
    cfg = load_config(["configs/tictactoe_move.yaml"], [
        f"model.path={warm_model_dir}", f"output_dir={out}", "steps=2",
        "rollout.groups_per_step=2", "eval.every=2", "eval.games=1", "wandb.mode=disabled",
        "learner.checkpoint.every=0"])
    train(cfg, LocalHost())
    return out / cfg.run_name


def test_the_glossary_names_every_key_the_demo_writes(demo_run):
    rows = (demo_run / "metrics.jsonl").read_text().splitlines()
    written = {key for row in rows for key in json.loads(row)}
    assert any(k.startswith("eval/") for k in written)
    assert sorted(k for k in written if glossary_entry(k) is None) == []
    page = (ROOT / "docs" / "reference" / "metrics.md").read_text()
    assert all(f"`{entry}`" in page for entry in GLOSSARY)


def test_a_results_page_is_generated_from_the_run(demo_run, warm_model_dir, tmp_path):
    """Its training table is the run's metrics; its baselines are the reference players'."""
    from arl.app.results import main
    from arl.rollout.reference import play_reference

    spec = tmp_path / "results.yaml"
    spec.write_text(yaml.safe_dump({"pages": [{
        "page": "demo", "title": "Two steps", "command": "arl train ...", "run": str(demo_run),
        "warm_start": warm_model_dir, "episodes": 8, "games": 2, "opponents": ["random"],
        "positions": ["configs/positions/win_in_one.jsonl"]}]}))
    assert main([str(spec), str(tmp_path / "out")]) == 0
    page = (tmp_path / "out" / "demo.md").read_text()
    assert (tmp_path / "out" / "demo.png").stat().st_size > 10_000
    rows = [json.loads(line) for line in (demo_run / "metrics.jsonl").read_text().splitlines()]
    reward = np.mean([r["rollout/reward_mean"] for r in rows])
    assert f"| `rollout/reward_mean` | {reward:.3f} | {reward:.3f} |" in page
    env = load_config([str(demo_run / "config.json")], check_paths=False).env
    random_ = np.mean([p.reward for p in play_reference(env, "random", 8, 10**9)])
    assert f"| uniformly random legal | {random_:+.3f} | {random_:+.3f} |" in page
    for row in ("perfect play", "warm start", "final checkpoint (step 2)"):
        assert f"| {row}" in page
    assert "## How this page was made" in page and "torch " in page
    assert "[Two steps](demo.md)" in (tmp_path / "out" / "index.md").read_text()


def test_the_results_command_writes_only_the_pages_asked_and_refuses_bad_ones(tmp_path,
                                                                              capsys):
    from arl.app.results import main

    spec = tmp_path / "results.yaml"
    pages = [{"page": name, "title": name, "command": "arl train ...",
              "run": str(tmp_path / "missing" / name)} for name in ("one", "two")]
    spec.write_text(yaml.safe_dump({"pages": pages}))
    assert main([str(spec), str(tmp_path / "out"), "--page", "two"]) == 0
    said = capsys.readouterr().out
    assert "two: no run at" in said and "one:" not in said
    for argv in ([str(tmp_path / "nope.yaml")], [str(spec), "--page", "three"]):
        with pytest.raises(SystemExit) as stop:
            main(argv)
        assert stop.value.code == 2
        assert capsys.readouterr().err.strip().splitlines()[-1].count("error:") == 1


def test_no_file_cites_a_document_that_is_not_in_the_repository():
    cited = re.compile(r"\b((?:docs/)?[A-Za-z_./-]*[A-Z_a-z]\.md)\b")
    missing = []
    for path in [*ROOT.glob("arl/**/*.py"), *ROOT.glob("tests/**/*.py"),
                 *ROOT.glob("bench/*.py"), *ROOT.glob("configs/**/*.yaml"),
                 *ROOT.glob("*.md"), *ROOT.glob("docs/**/*.md"), ROOT / "Makefile"]:
        if path.name == "test_docs.py":  # it writes pages of its own
            continue
        for name in cited.findall(path.read_text()):
            where = [ROOT / name, path.parent / name, ROOT / "docs" / name,
                     ROOT / "docs" / "reference" / name, ROOT / "docs" / "results" / name]
            if name.endswith(".md") and not any(p.is_file() for p in where):
                missing.append(f"{path.relative_to(ROOT)}: {name}")
    assert missing == []
