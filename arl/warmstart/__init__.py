"""The warm start: the tiny offline model (tokenizer, architecture), the synthetic
transcripts that teach it the chat and tool-call format, and the supervised pass
(`arl warmstart`). Above actors/ in the layers: it evaluates what it built with the rollout
engine."""
