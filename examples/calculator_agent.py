"""A multi-turn agent with two tools, written against the chat endpoint
(`env.agent=examples.calculator_agent:run_agent`): the model may `multiply` two numbers as
often as it likes, then `answer`; reward 1 for the right product, 0 for a wrong one, -1 if it
never answers properly. The task comes from the episode's seed, so a group shares it.
"""

from __future__ import annotations

import json
import random

from arl.agent import AgentResult, AgentTask

TOOLS = [
    {"type": "function", "function": {
        "name": "multiply", "description": "The product of a and b.",
        "parameters": {"type": "object", "required": ["a", "b"], "properties": {
            "a": {"type": "integer"}, "b": {"type": "integer"}}}}},
    {"type": "function", "function": {
        "name": "answer", "description": "Give the final answer.",
        "parameters": {"type": "object", "required": ["value"],
                       "properties": {"value": {"type": "integer"}}}}},
]


async def run_agent(client, task: AgentTask) -> AgentResult:
    rng = random.Random(task.seed)
    a, b = rng.randint(2, 99), rng.randint(2, 99)
    messages = [{"role": "system", "content": "Use the tools. Answer with `answer`."},
                {"role": "user", "content": f"What is {a} times {b}?"}]
    calls = 0
    for _ in range(task.max_turns):
        reply = await client.chat.completions.create(model=task.model, messages=messages,
                                                     tools=TOOLS)
        message = reply.choices[0].message
        if not message.tool_calls:  # no valid call: the parser's reason is in the reply
            break
        call = message.tool_calls[0]
        args = json.loads(call.function.arguments)
        if call.function.name == "answer":
            return AgentResult(float(args["value"] == a * b), metrics={"multiplies": calls})
        calls += 1
        messages += [message.model_dump(), {"role": "tool", "tool_call_id": call.id,
                                            "content": str(args["a"] * args["b"])}]
    return AgentResult(-1.0, metrics={"multiplies": calls})
