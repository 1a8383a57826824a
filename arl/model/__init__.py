"""The model: the tiny offline model, its tokenizer and chat template, loading any HF causal
LM and its token log-probs, LoRA adapters, GGUF conversion. The learner and the rollout code
both use it; it knows neither."""
