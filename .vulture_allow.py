# Names vulture (the dead-code check of `make lint`) cannot see being used: methods Ray calls by
# name on actors, hooks that frameworks call, attributes set for their side effects, and
# pytest's own conventions. Each line is a use of the name.
from arl import agent
from arl.learner import worker as learner
from arl.rollout import worker as rollout
from arl.app import view

learner.LearnerWorker.broadcast_weights  # called through ActorGroup.submit("broadcast_weights")
rollout.RolloutWorker.receive_weights  # called through ActorGroup.submit("receive_weights")
view.ReportHandler.do_GET  # http.server's request hook
view.ReportHandler.log_message  # http.server's logging hook
agent.parsed_turn  # the helper agent functions call (examples/env_agent.py)
_.ENABLE_RAY_CLUSTER  # a Ray constant set for its effect (arl/actors/connect.py)
_._timeout  # ProcessGroupNCCL options (arl/model/transport.py)
_._store  # kept alive with its process group (arl/model/transport.py)
_.rootRank  # BroadcastOptions (arl/model/transport.py)
_.normalizer  # tokenizers' pipeline, set for its effect (arl/model/tiny.py)
_.pre_tokenizer
_.decoder
_.padding_side
_.generation_config
pytestmark  # pytest's module marker
one_thread  # a pytest fixture
pytest_sessionfinish  # a pytest hook (tests/conftest.py)
pytest_unconfigure  # a pytest hook (tests/conftest.py)
_one_thread_per_process  # an autouse fixture
_local_ray  # an autouse fixture (tests/actors/test_model_files.py)
make_agent  # named by env.opponent_agent in tests/envs/test_textarena.py
mixed  # named by env.agent in tests/system/test_agent_train.py
on_step_begin  # transformers' TrainerCallback hook (bench/trl_compare.py)
