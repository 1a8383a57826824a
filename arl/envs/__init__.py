"""Game environments implementing `arl.protocols.Env`: pure rules, opponents, the envs and
their registry (`envs.registry`). Imports only from `arl`; no torch, no ray."""
