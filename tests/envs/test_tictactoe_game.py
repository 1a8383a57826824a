"""Full tic-tac-toe games: outcomes and rewards, invalid turns in both modes, determinism."""

import pytest

from arl.envs import tictactoe_rules as rules
from arl.envs.opponents import PolicyOpponent
from arl.envs.registry import env_config, make_env
from arl.types import Outcome, ToolCall, ToolCallError, ToolCallErrorKind


def _call(square) -> ToolCall:
    return ToolCall("choose_square", {"square": square})


def _lowest_square_opponent() -> PolicyOpponent:
    """A predictable opponent: always the lowest empty square."""
    return PolicyOpponent(lambda board, player, rng: rules.legal_moves(board)[0],
                          rules.legal_moves)


def _seed_for(agent: str, cfg, opponent=None) -> int:
    env = make_env(cfg, opponent)
    return next(s for s in range(100) if env.reset(s) and env.agent == agent)


def _play(env, squares):
    steps = [env.step(_call(s)) for s in squares]
    assert all(not s.terminated for s in steps[:-1]) and steps[-1].terminated
    return steps[-1]


@pytest.mark.parametrize("agent, squares", [("X", [5, 9, 3, 7]), ("O", [5, 3, 7])])
def test_win_as_either_mark(agent, squares):
    cfg = env_config(name="tictactoe", opponent="policy", board_format="grid")
    env = make_env(cfg, _lowest_square_opponent())
    reset = env.reset(_seed_for(agent, cfg, _lowest_square_opponent()))
    if agent == "O":  # the opponent opened, and the prompt says where
        assert reset.messages[1].content.startswith("Opponent played square 1.\nX|2|3")
    last = _play(env, squares)
    assert last.reward == 1.0
    assert last.outcome == Outcome("win", "win", tuple(squares))
    assert last.messages[0].content.endswith("You win.")


def test_loss():
    cfg = env_config(name="tictactoe", opponent="policy", board_format="grid")
    env = make_env(cfg, _lowest_square_opponent())
    env.reset(_seed_for("X", cfg, _lowest_square_opponent()))
    last = _play(env, [5, 6, 9])  # O takes 1, 2, 3
    assert last.reward == -1.0 and last.outcome.kind == "loss"
    assert last.messages[0].content == (
        "You played square 9. Opponent played square 3.\nO|O|O\n4|X|X\n7|8|X\nYou lose."
    )


def test_perfect_play_against_minimax_draws():
    cfg = env_config(name="tictactoe", opponent="minimax", board_format="grid")
    env = make_env(cfg)
    for seed in range(6):
        env.reset(seed)
        step = None
        while step is None or not step.terminated:
            step = env.step(_call(rules.best_moves(env.board, env.agent)[0]))
        assert step.reward == 0.0 and step.outcome.kind == "draw"


def test_minimax_punishes_blunders():
    cfg = env_config(name="tictactoe", opponent="minimax")
    env = make_env(cfg)
    for seed in range(6):
        env.reset(seed)
        step = None
        while step is None or not step.terminated:
            worst = min(rules.legal_moves(env.board), key=lambda m: -rules.value(
                rules.play(env.board, m, env.agent), rules.other(env.agent)))
            step = env.step(_call(worst))
        assert step.reward == -1.0 and step.outcome.kind == "loss"


@pytest.mark.parametrize("board_format,empty", [
    ("lists", "X: -\nO: -\nfree: 1 2 3 4 5 6 7 8 9"),
    ("grid", "1|2|3\n4|5|6\n7|8|9"),
])
def test_an_exchange_reads_well(board_format, empty):
    cfg = env_config(name="tictactoe", opponent="random", board_format=board_format)
    env = make_env(cfg)
    reset = env.reset(_seed_for("X", cfg))
    assert reset.messages[0].content == (
        "You play tic-tac-toe as X against an opponent. "
        "Reply with one choose_square tool call per turn."
    )
    assert reset.messages[1].content == f"{empty}\nYou are X. Your move."
    step = env.step(_call(5))
    (reply,) = step.messages
    assert reply.role == "tool" and step.reward == 0.0 and not step.terminated
    assert reply.content.startswith("You played square 5. Opponent played square ")
    assert reply.content.endswith(f"\n{rules.render(env.board, board_format)}\nYour move.")


@pytest.mark.parametrize("turn", [
    ToolCallError(ToolCallErrorKind.MALFORMED, "not JSON"),
    _call(11),
    ToolCall("drop_piece", {"column": 1}),
])
def test_invalid_turn_ends_the_game_by_default(turn):
    env = make_env(env_config(name="tictactoe", opponent="random"))
    env.reset(0)
    step = env.step(turn)
    assert step.terminated and step.reward == -1.0
    assert step.outcome == Outcome("invalid", "invalid", ())
    assert step.messages[0].content.endswith("Game over.")
    with pytest.raises(RuntimeError):
        env.step(_call(1))


def test_occupied_square_is_invalid():
    cfg = env_config(name="tictactoe", opponent="policy")
    env = make_env(cfg, _lowest_square_opponent())
    env.reset(_seed_for("X", cfg, _lowest_square_opponent()))
    env.step(_call(5))  # the opponent answers on 1
    step = env.step(_call(1))
    assert step.terminated and step.outcome.result == "invalid"
    assert step.messages[0].content == "Illegal move: square 1 is taken. Game over."


def test_retry_allows_max_retries_per_turn_then_ends():
    cfg = env_config(name="tictactoe", opponent="random", invalid_action="retry", max_retries=2)
    env = make_env(cfg)
    env.reset(_seed_for("X", cfg))
    bad = ToolCallError(ToolCallErrorKind.MISSING, "no call")
    first, second = env.step(bad), env.step(_call(0))
    assert not first.terminated and first.reward == 0.0 and first.outcome is None
    assert first.messages[0].content.endswith("Try again (1 retry left).")
    assert second.messages[0].content.endswith("Try again (0 retries left).")
    board = env.board
    assert not env.step(_call(rules.legal_moves(board)[0])).terminated  # retries reset
    assert not env.step(bad).terminated and not env.step(bad).terminated
    last = env.step(bad)
    assert last.terminated and last.reward == -1.0
    assert last.outcome == Outcome("invalid", "invalid", (rules.legal_moves(board)[0],))


def test_retry_with_zero_retries_ends_at_once():
    cfg = env_config(name="tictactoe", invalid_action="retry", max_retries=0)
    env = make_env(cfg)
    env.reset(0)
    assert env.step(_call(0)).terminated


def test_same_seed_and_moves_give_the_same_game():
    cfg = env_config(name="tictactoe", opponent="eps_minimax", opponent_epsilon=0.5)

    def game(seed):
        env = make_env(cfg)
        out = [env.reset(seed)]
        while True:
            out.append(env.step(_call(rules.legal_moves(env.board)[0])))
            if out[-1].terminated:
                return out

    assert game(7) == game(7)
    assert len({str(game(s)) for s in range(10)}) > 1


def test_policy_opponent_falls_back_on_illegal_moves():
    opponent = PolicyOpponent(lambda board, player, rng: 5, rules.legal_moves)
    env = make_env(env_config(name="tictactoe", opponent="policy"), opponent)
    env.reset(_seed_for("X", env_config(name="tictactoe", opponent="random")))
    env.step(_call(5))  # the policy's 5 is taken now: the fallback moves instead
    assert opponent.fallback_count == 1


def test_policy_opponent_is_required_for_opponent_policy():
    with pytest.raises(ValueError, match="policy"):
        make_env(env_config(name="tictactoe", opponent="policy"))


def test_per_move_rewards_and_turn_states():
    cfg = env_config(name="tictactoe", opponent="policy", reward_move_best=0.25,
                    reward_move_blunder=-0.5, board_format="grid")
    env = make_env(cfg, _lowest_square_opponent())
    seed = _seed_for("X", cfg, _lowest_square_opponent())
    env.reset(seed)
    first = env.step(_call(5))  # the centre keeps the draw: a best move
    assert first.reward == 0.25 and first.turn_state == "........./X"
    for opening in range(1, 10):  # find a position where X can blunder
        env.reset(seed)
        env.step(_call(opening))
        board = env.board
        best = rules.best_moves(board, "X")
        blunders = [m for m in rules.legal_moves(board) if m not in best]
        if blunders:
            break
    second = env.step(_call(blunders[0]))
    assert second.turn_state == "".join(board) + "/X"
    assert second.reward == pytest.approx(-0.5 + (cfg.reward_loss if second.terminated else 0))
    plain = make_env(env_config(name="tictactoe", opponent="policy"), _lowest_square_opponent())
    plain.reset(0)
    assert plain.step(_call(5)).reward == 0.0  # off by default: only the end is rewarded


def test_an_opponent_pool_draws_one_member_per_game():
    cfg = env_config(name="tictactoe", opponent="pool", opponent_pool=["random", "minimax",
                                                                      "policy"])
    policy = _lowest_square_opponent()
    seen = set()
    for seed in range(40):
        env = make_env(cfg, policy)
        env.reset(seed)
        member = env._opponent.current
        seen.add(type(member).__name__)
        env.reset(seed)
        assert type(env._opponent.current) is type(member)  # the seed decides
    assert seen == {"RandomOpponent", "MinimaxOpponent", "PolicyOpponent"}


def test_the_epsilon_curriculum_falls_to_its_end():
    from arl.envs.opponents import opponent_schedule

    cfg = env_config(name="tictactoe", opponent_epsilon=0.3, epsilon_start=1.0,
                    epsilon_decay_steps=100)
    assert [opponent_schedule(cfg, s).opponent_epsilon for s in (0, 50, 100, 400)] == \
        pytest.approx([1.0, 0.65, 0.3, 0.3])
    assert opponent_schedule(env_config("tictactoe"), 10).opponent_epsilon == 0.3  # off by default
