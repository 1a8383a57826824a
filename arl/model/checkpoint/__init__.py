"""Checkpoints: the one place that writes, reads, verifies, lists and exports them, and the
only code that opens a checkpoint's files.

store.py    the format: save, load, verify, the manifest, the model files and the run config
            a checkpoint records (data: nothing it names is imported)
files.py    the file layer: bytes read once, never through a link, checked against sha256
export.py   a checkpoint as a Hugging Face model folder
runs.py     checkpoints among a run's files: which one a path names, the newest, upkeep
pointer.py  the `latest` pointer of a run's checkpoints folder
"""
