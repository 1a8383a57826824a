"""Each concern behind its one seam (docs/ARCHITECTURE.md, "Where each concern lives"): only
the checkpoint package opens a checkpoint's files, and no code reaches into another object's
private state."""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHECKPOINT_PACKAGE = ROOT / "arl" / "model" / "checkpoint"
# The names of a checkpoint's files, as constants or as text: code that uses one is opening a
# checkpoint's files itself.
CHECKPOINT_NAMES = {"MODEL_FILE", "MANIFEST_FILE", "LEARNER_FILE", "OPTIMIZER_TENSORS_FILE",
                    "OPTIMIZER_JSON_FILE", "DATA_FILES", "HF_DIR", "read_verified", "verify_file",
                    "json_of", "read_json"}
CHECKPOINT_TEXTS = {"manifest.json", "learner.json", "optimizer.json", "optimizer.safetensors"}
# Private attributes of other libraries' objects that arl must use, each for a reason.
FOREIGN_PRIVATE = {
    "argparse._SubParsersAction",  # the type of add_subparsers' result, for annotations
    "node._get_node",  # omegaconf: a DictConfig's child node without resolving it
    "options._timeout",  # torch: ProcessGroupNCCL.Options has no public timeout
    "model.config._attn_implementation",  # transformers: the attention kernel in use
}


def _sources() -> list[pathlib.Path]:
    return sorted((ROOT / "arl").rglob("*.py"))


def test_only_the_checkpoint_package_opens_checkpoint_files():
    offenders = []
    for path in _sources():
        if CHECKPOINT_PACKAGE in path.parents:
            continue
        tree = ast.parse(path.read_text())
        docs = {id(n.body[0].value) for n in ast.walk(tree)
                if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
                and n.body and isinstance(n.body[0], ast.Expr)}
        for node in ast.walk(tree):
            name = (node.id if isinstance(node, ast.Name) else node.attr
                    if isinstance(node, ast.Attribute) else None)
            names = [a.name for a in node.names] if isinstance(node, ast.ImportFrom) else []
            text = (node.value if isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and id(node) not in docs else "")
            if (name in CHECKPOINT_NAMES or set(names) & CHECKPOINT_NAMES
                    or any(t in text for t in CHECKPOINT_TEXTS)):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, offenders


def test_no_code_uses_another_objects_private_attributes():
    """`obj._name` only on self or cls: state behind a class's seam stays there (the cluster's,
    a weight sync's), and a library's private names only where listed, with a reason."""
    offenders = []
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                    and not node.attr.startswith("__")
                    and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
                    and ast.unparse(node) not in FOREIGN_PRIVATE):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} {ast.unparse(node)}")
    assert not offenders, offenders
