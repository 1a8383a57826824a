"""Agent functions the system tests train with (importable as tests.system.agent_fns)."""

from __future__ import annotations

from examples.calculator_agent import run_agent as calculator


async def mixed(client, task):
    """The calculator agent, except in every fourth group, which asks for another
    temperature: refused, so those episodes fail and their groups are not trained on."""
    if task.group_id % 4 == 3:
        await client.chat.completions.create(model=task.model, temperature=0.3, messages=[
            {"role": "user", "content": "hello"}])
    return await calculator(client, task)


async def stuck(client, task):
    """The calculator agent, except in group 1 of every step, which waits forever on
    something that never comes (a tool server that hangs)."""
    import asyncio

    if task.group_id % 2 == 1:
        await asyncio.sleep(3600)
    return await calculator(client, task)
