"""Every env passes the conformance checker, and the checker catches broken envs."""

import itertools

import pytest

from arl.envs import connect_four_rules, tictactoe_rules
from arl.envs.check import EnvCheckError, check_env
from arl.envs.opponents import PolicyOpponent
from arl.envs.registry import env_config, make_env
from arl.types import EnvStep, Message

OPPONENTS = ("random", "minimax", "eps_minimax", "policy")


def _factory(cfg):
    def build():
        opponent = None
        if getattr(cfg, "opponent", None) == "policy":  # a stand-in "model": the highest legal move
            rules = tictactoe_rules if cfg.name == "tictactoe" else connect_four_rules
            legal = rules.legal_moves
            opponent = PolicyOpponent(lambda board, player, rng: legal(board)[-1], legal)
        return make_env(cfg, opponent)
    return build


def test_tictactoe_move_passes():
    check_env(_factory(env_config(name="tictactoe_move")), seeds=range(10))


@pytest.mark.parametrize("name, opponent, action", list(itertools.product(
    ("tictactoe", "connect_four"), OPPONENTS, ("end", "retry"))))
def test_full_games_pass(name, opponent, action):
    depth = {"search_depth": 2} if name == "connect_four" else {}
    cfg = env_config(name=name, opponent=opponent, invalid_action=action, **depth)
    check_env(_factory(cfg), seeds=range(3))


class _Broken:
    """tictactoe_move with one injected defect."""

    def __init__(self, defect: str):
        self.env, self.defect, self.calls = make_env(env_config()), defect, 0

    def reset(self, seed):
        self.calls += 1
        return self.env.reset(seed + self.calls if self.defect == "nondeterministic" else seed)

    def step(self, turn):
        if self.defect == "raises" and not hasattr(turn, "name"):
            raise ValueError("cannot handle errors")
        if self.defect == "int_reward":
            return EnvStep((Message("tool", "ok"),), 1, True, False)
        if self.defect == "never_ends":
            return EnvStep((Message("tool", "again"),), 0.0, False, False)
        if self.defect == "empty_reply":
            return EnvStep((Message("tool", " "),), 0.0, True, False)
        return self.env.step(turn)


@pytest.mark.parametrize("defect, words", [
    ("nondeterministic", "not deterministic"),
    ("raises", "raised ValueError"),
    ("int_reward", "finite float"),
    ("never_ends", "no end within"),
    ("empty_reply", "empty"),
])
def test_checker_catches(defect, words):
    with pytest.raises(EnvCheckError, match=words):
        check_env(lambda: _Broken(defect), seeds=[0], max_steps=20)
