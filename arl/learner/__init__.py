"""The learner: model loading, collation, GSPO steps, checkpoints. Imports only from `arl`."""
