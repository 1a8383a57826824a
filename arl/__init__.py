"""arl: agentic RL post-training with GSPO on Ray.

The core package imports no Ray, vLLM, DeepSpeed or wandb: those load at the edge.
"""

__version__ = "0.2.0.dev0"
