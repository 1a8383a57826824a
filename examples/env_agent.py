"""Any arl env played by an agent function: the env's own episode, written as user code
against the OpenAI-compatible endpoint (`env.agent=examples.env_agent:run_agent`).

It yields exactly the trajectories of arl's built-in episode loop for the same seeds (a test
checks it): the messages it sends are the env's, the replies it echoes are the endpoint's,
so every request extends the recorded conversation and nothing is re-tokenised.
"""

from __future__ import annotations

from arl.agent import AgentResult, AgentTask, parsed_turn


async def run_agent(client, task: AgentTask) -> AgentResult:
    env = task.make_env()
    start = env.reset(task.seed)
    messages = [m.as_dict() for m in start.messages]
    tools = [t.as_dict() for t in start.tools]
    rewards, states, outcome = [], [], None
    for _ in range(task.max_turns):
        completion = await client.chat.completions.create(
            model=task.model, messages=messages, tools=tools)
        step = env.step(parsed_turn(completion))  # a ToolCall, or the parser's error
        rewards.append(step.reward)
        states.append(step.turn_state)
        outcome = step.outcome or outcome
        if step.terminated or step.truncated:
            break
        messages += [completion.choices[0].message.model_dump(),
                     *(m.as_dict() for m in step.messages)]
    return AgentResult(sum(rewards), outcome, tuple(rewards), tuple(states))
