"""Does a sweep waiting on an API use the wait? LLM episodes at concurrency 1 and 32.

A scripted litellm provider (`CustomLLM`, registered in `litellm.custom_provider_map`)
sleeps a fixed latency per call and answers with a generic policy: the first
time a participant handles a request it calls its first tool (arguments filled
from the schema: hints, enum members, numbers), then it answers in text. The
real `llm` path runs end to end — tool schemas, conversation memory, the
per-provider semaphore, litellm's dispatch and cost accounting; only the
network is replaced by the sleep.

For each concurrency N the script runs the same episodes (seeds 0..K-1) and
prints the wall time against the ideal, calls × latency / N. The target is
≥ 90% of ideal at N = 32. Offline: no network is used.

    .venv/bin/python benchmarks/llm_concurrency.py                # A1 (or D1), 100 episodes
    .venv/bin/python benchmarks/llm_concurrency.py --latency 0.5 --concurrency 1 8 32
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

ROOT = Path(__file__).resolve().parents[1]
MODEL = "bench/agent"


def _pick_world(name: str | None) -> Any:
    from eairdsl.api import UsageError, resolve_world

    candidates = [name] if name else ["a1", "d1"]
    for candidate in candidates:
        path = ROOT / "worlds" / f"{candidate}.eair"
        if not path.is_file():
            continue
        try:
            return resolve_world(path)
        except UsageError as exc:
            print(f"note: {path.name} does not compile ({str(exc).splitlines()[0]}); "
                  "trying the next world", file=sys.stderr)
    raise SystemExit(f"no usable world among {', '.join(candidates)}")


def _value(schema: dict[str, Any]) -> Any:
    if "enum" in schema:
        return schema["enum"][0]
    hint = str(schema.get("description", ""))
    if "e.g. " in hint:
        return hint.split("e.g. ", 1)[1].split(",", maxsplit=1)[0].strip()
    kind = schema.get("type")
    if kind in ("number", "integer"):
        return 1
    if kind == "boolean":
        return False
    if kind == "array":
        return []
    if kind == "object":
        return {}
    return "benchmark"


def _provider(latency: float) -> Any:
    import litellm
    from litellm import CustomLLM, ModelResponse

    class Sleepy(CustomLLM):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.calls = 0

        async def acompletion(self, *args: Any, **kwargs: Any) -> ModelResponse:
            messages = kwargs.get("messages") or args[1]
            params = kwargs.get("optional_params") or {}
            self.calls += 1
            await asyncio.sleep(latency)
            last = messages[-1]
            tools = params.get("tools") or []
            if tools and last.get("role") == "user" and params.get("tool_choice") != "none":
                fn = tools[0]["function"]
                props = fn["parameters"].get("properties", {})
                args_ = {k: _value(v) for k, v in props.items()
                         if k in fn["parameters"].get("required", [])}
                message = {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "t", "type": "function",
                     "function": {"name": fn["name"], "arguments": json.dumps(args_)}}]}
            else:
                message = {"role": "assistant", "content": "Thanks, I have handled this."}
            return ModelResponse(choices=[{"message": message, "finish_reason": "stop"}],
                                 usage={"prompt_tokens": 800, "completion_tokens": 40,
                                        "total_tokens": 840})

    provider = Sleepy()
    litellm.custom_provider_map = [{"provider": "bench", "custom_handler": provider}]
    litellm.register_model({MODEL: {"litellm_provider": "bench", "mode": "chat",
                                     "input_cost_per_token": 1.5e-7,
                                     "output_cost_per_token": 6e-7}})
    return provider


async def _run(world: Any, condition: str | None, episodes: int, concurrency: int) -> list[Any]:
    from eairdsl.agents.llm import LLMSettings
    from eairdsl.api import run_episodes_concurrently

    llm = LLMSettings(model=MODEL, max_connections=concurrency, max_episodes=episodes,
                      timeout=60, retries=0)
    return await run_episodes_concurrently(world, condition, seed=0, episodes=episodes, llm=llm)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world", help="a1 or d1 (default: a1 if it compiles, else d1)")
    parser.add_argument("--condition", default=None)
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--latency", type=float, default=1.0, help="seconds per call")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 32])
    args = parser.parse_args()

    from eairdsl.runtime.engine import CompiledWorld

    world = CompiledWorld(_pick_world(args.world))
    started = time.perf_counter()
    provider = _provider(args.latency)
    print(f"litellm imported in {time.perf_counter() - started:.1f}s; world "
          f"{world.world.meta.name}, {args.episodes} episodes, {args.latency:g}s per call")
    asyncio.run(_run(world, args.condition, 2, 2))  # warm-up: litellm's lazy imports
    print(f"{'concurrency':>11} {'calls':>6} {'wall s':>8} {'ideal s':>8} {'of ideal':>9} "
          f"{'valid':>6} {'cost $':>8}")
    for n in args.concurrency:
        before = provider.calls
        t0 = time.perf_counter()
        results = asyncio.run(_run(world, args.condition, args.episodes, n))
        wall = time.perf_counter() - t0
        calls = provider.calls - before
        ideal = calls * args.latency / n
        valid = sum(1 for r in results if r.valid)
        cost = sum(r.usage["total"]["cost"] for r in results if r.usage)
        print(f"{n:>11} {calls:>6} {wall:>8.2f} {ideal:>8.2f} {ideal / wall:>8.1%} "
              f"{valid:>6} {cost:>8.4f}")


if __name__ == "__main__":
    main()
