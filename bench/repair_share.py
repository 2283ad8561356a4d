"""The repair's share of submits (issue 36): agent turns on text-API models with the devhorde's
``malformed_first_replies`` knob on, against the same turns with it off.

Run: ``.venv/bin/python -m bench.repair_share [--conversations 10] [--redis-url URL] [--json]``.

Starts Redis (a throwaway ``redis-server`` unless ``--redis-url``), the devhorde with the bundled ``text-only``
scenario plus a Qwen 2.5 text worker (one model per family of the prompt contract: ChatML, Llama 3, Mistral; fast
workers) and one front. For each knob setting and family it runs ``--conversations`` agent conversations through the
OpenAI SDK: a tool call turn (``tools`` = get_weather), the tool-result turn, and one ``response_format`` json_schema
request, three client requests each. The devhorde's submit log (``GET /_devhorde/submits``) gives the text submits
the front made, dry runs apart; a submit whose prompt holds the repair turn ("Your previous reply was not valid: ")
is a repair. The figures: client requests served and failed, text submits, repairs, and the repairs' share of
submits. With the knob on every prompt holding tools or the JSON instruction is malformed once, so with
``HORDE_OAI_TEXT_REPAIR_ATTEMPTS=1`` half the submits are repairs; the knob off shows none.
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from typing import Any

import httpx
import openai

from bench.relay_latency import bench_stack, machine
from devhorde.prompted import REPAIR_START
from devhorde.scenario import load_scenario
from tests.tool_prompts import CITY_FORMAT, WEATHER

FAMILY_MODELS = {
    "chatml": "koboldcpp/Qwen2.5-7B-Instruct",
    "llama-3": "koboldcpp/Meta-Llama-3-8B-Instruct",
    "mistral": "koboldcpp/Mistral-7B-Instruct-v0.3",
}
"""One text model per family of the prompt contract (the ``text-only`` scenario's, plus Qwen 2.5)."""


def bench_document(*, malformed: bool) -> dict[str, Any]:
    """The ``text-only`` scenario with a Qwen 2.5 worker, every worker fast, and the knob."""
    scenario = load_scenario("text-only").model_dump(mode="json")
    qwen = {**scenario["workers"][0], "name": "qwen-text-1", "model": FAMILY_MODELS["chatml"], "id": None}
    workers = [*scenario["workers"], qwen]
    for worker in workers:
        worker.update({"time_to_first_token_seconds": 0.0, "tokens_per_second": 100_000, "threads": 8})
    return {**scenario, "workers": workers, "malformed_first_replies": malformed}


def conversation(sdk: openai.OpenAI, model: str, mark: str) -> list[str]:
    """One agent conversation (tool call, tool result, structured output); the errors' codes, if any."""
    errors: list[str] = []
    messages: list[Any] = [{"role": "user", "content": f"What is the weather in Paris? [{mark}]"}]
    try:
        first = sdk.chat.completions.create(model=model, messages=messages, tools=[WEATHER], max_tokens=200)
        calls = first.choices[0].message.tool_calls or []
        messages.append(first.choices[0].message.model_dump(exclude_none=True))
        messages += [{"role": "tool", "tool_call_id": call.id, "content": "sunny, 24 C"} for call in calls]
        sdk.chat.completions.create(model=model, messages=messages, tools=[WEATHER], max_tokens=200)
    except openai.APIStatusError as error:
        errors += [str(error.code), "not_sent"] if len(messages) == 1 else [str(error.code)]
    try:
        sdk.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": f"Describe Lisbon. [{mark}]"}],
            response_format=CITY_FORMAT,  # type: ignore[arg-type]
            max_tokens=200,
        )
    except openai.APIStatusError as error:
        errors.append(str(error.code))
    return errors


def run_setting(front_url: str, control_url: str, conversations: int, *, malformed: bool) -> dict[str, Any]:
    """Every family's conversations with the knob set; the submits the devhorde logged for them."""
    httpx.put(f"{control_url}/scenario", json=bench_document(malformed=malformed), timeout=10).raise_for_status()
    httpx.post(f"{control_url}/reset", timeout=30).raise_for_status()
    sdk = openai.OpenAI(base_url=f"{front_url}/v1", api_key="0000000000", max_retries=0, timeout=60)
    errors: list[str] = []
    mark = "bench" + uuid.uuid4().hex[:8]
    started = time.perf_counter()
    for model in FAMILY_MODELS.values():
        for _ in range(conversations):
            errors += conversation(sdk, model, mark)
    wall = time.perf_counter() - started
    submits = [
        s
        for s in httpx.get(f"{control_url}/submits", timeout=30).json()
        if isinstance(s.get("payload"), dict) and mark in str(s["payload"].get("prompt", ""))
    ]
    generations = [s for s in submits if not s["payload"].get("dry_run")]
    repairs = [s for s in generations if REPAIR_START in str(s["payload"]["prompt"])]
    requests = 3 * conversations * len(FAMILY_MODELS)
    return {
        "malformed_first_replies": malformed,
        "client_requests": requests,
        "failed": len(errors),
        "failure_codes": sorted(set(errors)),
        "text_submits": len(generations),
        "dry_runs": len(submits) - len(generations),
        "repairs": len(repairs),
        "repair_share_pct": round(100 * len(repairs) / len(generations), 1) if generations else None,
        "wall_seconds": round(wall, 1),
    }


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--conversations", type=int, default=10, help="per family and knob setting (default 10)")
    parser.add_argument("--redis-url", default=None, help="a running Redis (default: a throwaway redis-server)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON only")
    return parser.parse_args(argv)


def run(argv: list[str] | None = None) -> dict[str, Any]:
    """Both knob settings; ``{"machine", "conversations_per_family", "runs": [{...per setting}]}``."""
    args = parse(argv)
    result: dict[str, Any] = {"machine": machine(), "conversations_per_family": args.conversations, "runs": []}
    # the submit log holds the latest 1000: 3 families x 3 requests x 2 submits per conversation stay under it
    with bench_stack(bench_document(malformed=False), {}, redis_url=args.redis_url) as stack:
        control = stack.horde_url.removesuffix("/api") + "/_devhorde"
        for malformed in (False, True):
            result["runs"].append(run_setting(stack.front_url, control, args.conversations, malformed=malformed))
    return result


def main(argv: list[str] | None = None) -> int:
    result = run(argv)
    if parse(argv).json:
        print(json.dumps(result))
        return 0
    print(result["machine"])
    print("| knob | client requests | failed | text submits | repairs | repairs' share of submits | wall s |")
    print("|---|---|---|---|---|---|---|")
    for row in result["runs"]:
        failed = f"{row['failed']} {' '.join(row['failure_codes'])}".strip()
        print(
            f"| malformed_first_replies: {str(row['malformed_first_replies']).lower()} | {row['client_requests']} | "
            f"{failed} | {row['text_submits']} | {row['repairs']} | {row['repair_share_pct']} % | "
            f"{row['wall_seconds']} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
