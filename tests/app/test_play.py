"""`arl play`: a person plays the agent through standard input, to the end of a game."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
ENDINGS = ("The agent wins.", "You win.", "Draw.", "The agent made an invalid move")


@pytest.mark.parametrize("you", ["X", "O"])
def test_a_person_plays_a_whole_game_through_stdin(you, warm_model_dir):
    # The person tries every square in order; taken ones are refused and asked again.
    moves = "".join(f"{sq}\n" for sq in range(1, 10)) * 2
    out = subprocess.run([sys.executable, "-m", "arl.app.cli", "play", warm_model_dir, "--you",
                          you], cwd=ROOT, input=moves, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    text = out.stdout
    assert f"you play {you}" in text
    assert text.count("agent plays") >= 1
    assert any(line.strip().startswith(ENDINGS) for line in text.splitlines()), text[-1500:]
    assert "|" in text  # the board was drawn
    if "agent plays square" in text:  # a valid call shows its probability
        assert "(p = " in text


def test_quitting_mid_game(warm_model_dir):
    out = subprocess.run([sys.executable, "-m", "arl.app.cli", "play", warm_model_dir, "--you",
                          "X"], cwd=ROOT, input="q\n", capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "bye" in out.stdout


def test_a_game_asked_one_board_at_a_time_restarts_the_conversation(warm_model_dir):
    # A real engine whose replies are scripted (the lowest free square), so the game goes on.
    from arl.app.play import HumanOpponent, _game
    from arl.envs.config import TicTacToeConfig
    from arl.envs.tictactoe import make_tictactoe
    from arl.episode import ChatRenderer
    from arl.rollout.engines.hf import HFEngine
    from tests.builders import ScriptedEngine

    engine = HFEngine(warm_model_dir, dtype="float32")
    tok = engine.get_tokenizer()
    scripted, asked = ScriptedEngine(tok, lambda board, agent: board.index(".") + 1), []
    engine.generate = lambda prompts, params: asked.extend(prompts) or scripted.generate(
        prompts, params)
    person = iter(f"{sq}\n" for sq in range(1, 10))
    shown: list[str] = []
    env = make_tictactoe(TicTacToeConfig(name="tictactoe", context="board", seat="X"),
                         opponent=HumanOpponent(lambda _: next(person), shown.append))
    _game(engine, ChatRenderer(tok, stop_token=tok.eos_token), env, 0, shown.append)
    assert len(asked) >= 3 and "".join(shown).count("agent plays square") == len(asked)
    # each turn a new conversation on the board alone, never the game's replies so far
    assert not any("Opponent played" in tok.decode(p) for p in asked)
