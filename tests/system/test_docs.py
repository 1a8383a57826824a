"""The documentation stays true: the README is short and its links resolve; the generated
pages are what the code generates; the config reference covers every key and the metrics
glossary every key a run of the demo's config writes; no file cites a missing document."""

from __future__ import annotations

import json
import pathlib
import re

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


def test_the_glossary_names_every_key_the_demo_writes(tmp_path, warm_model_dir):
    """The demo's config for 2 short steps in-process, evaluating on the last one."""
    cfg = load_config(["configs/tictactoe_move.yaml"], [
        f"model.path={warm_model_dir}", f"output_dir={tmp_path}", "steps=2",
        "rollout.groups_per_step=2", "eval.every=2", "eval.games=1", "wandb.mode=disabled",
        "learner.checkpoint.every=0"])
    train(cfg, LocalHost())
    rows = (tmp_path / cfg.run_name / "metrics.jsonl").read_text().splitlines()
    written = {key for row in rows for key in json.loads(row)}
    assert any(k.startswith("eval/") for k in written)
    assert sorted(k for k in written if glossary_entry(k) is None) == []
    page = (ROOT / "docs" / "reference" / "metrics.md").read_text()
    assert all(f"`{entry}`" in page for entry in GLOSSARY)


def test_no_file_cites_a_document_that_is_not_in_the_repository():
    cited = re.compile(r"\b((?:docs/)?[A-Za-z_./-]*[A-Z_a-z]\.md)\b")
    missing = []
    for path in [*ROOT.glob("arl/**/*.py"), *ROOT.glob("tests/**/*.py"),
                 *ROOT.glob("bench/*.py"), *ROOT.glob("configs/**/*.yaml"),
                 *ROOT.glob("*.md"), *ROOT.glob("docs/**/*.md"), ROOT / "Makefile"]:
        for name in cited.findall(path.read_text()):
            where = [ROOT / name, path.parent / name, ROOT / "docs" / name,
                     ROOT / "docs" / "reference" / name]
            if name.endswith(".md") and not any(p.is_file() for p in where):
                missing.append(f"{path.relative_to(ROOT)}: {name}")
    assert missing == []
