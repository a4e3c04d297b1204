"""What Phoenix and Langfuse read off a span: the semantic-convention attributes of the export.

`eairdsl.external.otel` builds the span tree of an episode; this module says what
the spans carry so that an OpenTelemetry backend shows them as it shows any agent
framework's traces, in both vocabularies such backends read:

- OpenTelemetry GenAI (`gen_ai.*`): `gen_ai.provider.name` (Required on inference
  and agent spans), provider-native model names (litellm's routing prefix
  `openai/` becomes the provider, not part of the name), the messages as the
  JSON of the conventions' message schema (`gen_ai.input.messages`,
  `gen_ai.output.messages`, `gen_ai.system_instructions`: `{role, parts}` with
  `text`, `tool_call` and `tool_call_response` parts);
- OpenInference (`llm.*`, `metadata`, `tag.tags`, `session.id`): the same
  messages flattened (`llm.input_messages.N.message.role|content|tool_calls.M.…`),
  the study's dimensions as `metadata` JSON and `tag.tags` on the root, and a
  `session.id` that groups the episodes of one study cell.

Everything here is a pure function of the trace header, a model-call record and
its sidecar line: the same inputs give the same attributes (the export's
`--epoch fixed` output stays byte-identical).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

__all__ = ["SIM_PROVIDER", "StudyCell", "backend_provider", "chat_content",
           "openinference_provider", "split_model", "study_cell"]

#: gen_ai.provider.name of the offline sim agents and scripted participants: not an
#: LLM provider, so a custom value in the project's namespace (the conventions allow one)
SIM_PROVIDER = "eairdsl.sim"
_SCRIPTED_PROVIDER = "eairdsl"

#: litellm's routing prefixes -> the GenAI conventions' `gen_ai.provider.name` values
#: (well-known values where one exists; otherwise the prefix itself)
_PROVIDERS = {
    "openai": "openai", "text-completion-openai": "openai", "azure": "azure.ai.openai",
    "azure_ai": "azure.ai.inference", "anthropic": "anthropic", "bedrock": "aws.bedrock",
    "bedrock_converse": "aws.bedrock", "sagemaker": "aws.sagemaker",
    "vertex_ai": "gcp.vertex_ai", "vertex_ai_beta": "gcp.vertex_ai", "gemini": "gcp.gemini",
    "cohere": "cohere", "cohere_chat": "cohere", "groq": "groq", "mistral": "mistral_ai",
    "deepseek": "deepseek", "xai": "x_ai", "perplexity": "perplexity",
    "watsonx": "ibm.watsonx.ai", "ollama": "ollama", "ollama_chat": "ollama",
}
#: gen_ai.provider.name -> OpenInference `llm.provider` (its own, shorter vocabulary)
_OPENINFERENCE = {"azure.ai.openai": "azure", "azure.ai.inference": "azure",
                  "aws.bedrock": "aws", "aws.sagemaker": "aws", "gcp.vertex_ai": "google",
                  "gcp.gemini": "google", "mistral_ai": "mistralai", "x_ai": "xai"}
#: model names litellm routes without a prefix, by their family
_BARE = (("gpt-", "openai"), ("o1", "openai"), ("o3", "openai"), ("o4", "openai"),
         ("chatgpt", "openai"), ("claude", "anthropic"), ("gemini", "gcp.gemini"),
         ("command", "cohere"), ("mistral", "mistral_ai"), ("deepseek", "deepseek"))


def split_model(model: str) -> tuple[str, str]:
    """(gen_ai.provider.name, provider-native model name) of a litellm model string:
    `openai/gpt-4o-mini` -> (`openai`, `gpt-4o-mini`); a bare name gets the provider of
    its family (`claude-…` -> `anthropic`), else `litellm` — litellm chose the route."""
    prefix, sep, rest = model.partition("/")
    if sep and rest:
        return _PROVIDERS.get(prefix, prefix), rest
    for start, provider in _BARE:
        if model.startswith(start):
            return provider, model
    return "litellm", model


def openinference_provider(provider: str) -> str:
    """OpenInference's `llm.provider` for a `gen_ai.provider.name`."""
    return _OPENINFERENCE.get(provider, provider)


def backend_provider(backend: str | None) -> str:
    """gen_ai.provider.name of an agent span from the participant's backend in the trace
    header (`llm:openai/gpt-4o` -> `openai`, `sim`, `sim:reckless` -> `eairdsl.sim`;
    a scripted actor or an imported participant -> `eairdsl`)."""
    if backend is None:
        return _SCRIPTED_PROVIDER
    if backend.startswith("llm:"):
        return split_model(backend.removeprefix("llm:"))[0]
    if backend == "sim" or backend.startswith("sim:"):
        return SIM_PROVIDER
    return _SCRIPTED_PROVIDER


# ------------------------------------------------------------------ study dimensions
@dataclass(frozen=True)
class StudyCell:
    """An episode's place in a study: the dimensions a backend filters and groups by."""

    world: str
    model: str
    condition: str
    instance: str
    seed: int
    levers: dict[str, Any]

    @property
    def session(self) -> str:
        """`session.id`: one study cell (world × model × condition), so a backend's
        session view lists the cell's episodes (instances × seeds) together."""
        return f"{self.world}/{self.model}/{self.condition}"

    def metadata(self) -> str:
        """OpenInference `metadata`: the dimensions as JSON text (sorted keys)."""
        return json.dumps({"world": self.world, "model": self.model,
                           "condition": self.condition, "instance": self.instance,
                           "seed": self.seed, "levers": self.levers},
                          sort_keys=True, ensure_ascii=False)

    def tags(self) -> list[str]:
        """OpenInference `tag.tags`: `key:value` per dimension, one per lever (sorted)."""
        levers = [f"lever:{k}={json.dumps(v, ensure_ascii=False)}"
                  for k, v in sorted(self.levers.items())]
        return [f"world:{self.world}", f"model:{self.model}",
                f"condition:{self.condition}", f"instance:{self.instance}",
                f"seed:{self.seed}", *levers]


def study_cell(header: dict[str, Any]) -> StudyCell:
    """The study dimensions of a trace header. The model is the run's `llm.model` when
    an LLM ran it, else the participants' backends (`sim`, `sim:reckless`, joined by
    `+` when they differ) — what `eairc study --models` names an arm by."""
    llm = header.get("llm")
    model = llm.get("model") if isinstance(llm, dict) else None
    if not isinstance(model, str) or not model:
        agents = header.get("agents")
        backends = sorted({str(v) for v in agents.values()}) if isinstance(agents, dict) else []
        model = "+".join(backends) or "unknown"
    levers = header.get("levers")
    seed = header.get("seed")
    return StudyCell(world=str(header.get("world")), model=model,
                     condition=str(header.get("condition")),
                     instance=str(header.get("instance")),
                     seed=seed if isinstance(seed, int) and not isinstance(seed, bool) else 0,
                     levers=levers if isinstance(levers, dict) else {})


# ------------------------------------------------------------------ messages
def _text(content: Any) -> str | None:
    """A chat message's text: a string, or the text parts of a content list joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [p.get("text") for p in content if isinstance(p, dict)]
        joined = [t for t in texts if isinstance(t, str)]
        return "\n".join(joined) if joined else None
    return None


def _calls(message: dict[str, Any]) -> list[dict[str, Any]]:
    """The tool calls an assistant message requested, as {id, name, arguments}."""
    out = []
    for c in message.get("tool_calls") or []:
        if not isinstance(c, dict):
            continue
        fn = c.get("function") if isinstance(c.get("function"), dict) else c
        assert isinstance(fn, dict)
        out.append({"id": c.get("id"), "name": fn.get("name"),
                    "arguments": fn.get("arguments")})
    return out


def _arguments(raw: Any) -> Any:
    """Tool-call arguments as the GenAI schema carries them: the JSON value when the
    model's text is JSON, else the text as sent."""
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    return raw


def _genai_message(message: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI-style chat message as the GenAI conventions' `{role, parts}`."""
    role = str(message.get("role") or "user")
    parts: list[dict[str, Any]] = []
    text = _text(message.get("content"))
    if role == "tool":
        parts.append({"type": "tool_call_response", "id": message.get("tool_call_id"),
                      "response": text})
    elif text is not None:
        parts.append({"type": "text", "content": text})
    for c in _calls(message):
        parts.append({"type": "tool_call", "id": c["id"], "name": c["name"],
                      "arguments": _arguments(c["arguments"])})
    out: dict[str, Any] = {"role": role, "parts": parts}
    if isinstance(message.get("name"), str):
        out["name"] = message["name"]
    return out


def _flat(prefix: str, i: int, message: dict[str, Any], attrs: dict[str, Any]) -> None:
    """One message in OpenInference's flattened form under `prefix.i.message.`."""
    base = f"{prefix}.{i}.message."
    attrs[base + "role"] = str(message.get("role") or "user")
    text = _text(message.get("content"))
    if text is not None:
        attrs[base + "content"] = text
    if isinstance(message.get("tool_call_id"), str):
        attrs[base + "tool_call_id"] = message["tool_call_id"]
    if isinstance(message.get("name"), str):
        attrs[base + "name"] = message["name"]
    for j, c in enumerate(_calls(message)):
        call = f"{base}tool_calls.{j}.tool_call."
        if isinstance(c["id"], str):
            attrs[call + "id"] = c["id"]
        if isinstance(c["name"], str):
            attrs[call + "function.name"] = c["name"]
        if c["arguments"] is not None:
            args = c["arguments"]
            attrs[call + "function.arguments"] = args if isinstance(args, str) else \
                json.dumps(args, sort_keys=True, ensure_ascii=False)


def _dump(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def chat_content(record: dict[str, Any], sidecar: dict[str, Any] | None) -> dict[str, Any]:
    """The prompt and the answer of one model call, in both vocabularies.

    The input is the sidecar's `messages` (the trace keeps only their digest); system
    messages go to `gen_ai.system_instructions` and stay first in the flattened
    `llm.input_messages` (OpenInference has no separate field). The output is the
    trace record's `reply` and `tool_calls`: a call that only requested a tool still
    has an output message, with its tool calls. The tools offered (the sidecar's
    schemas) are `llm.tools.N.tool.json_schema`."""
    attrs: dict[str, Any] = {}
    messages = sidecar.get("messages") if sidecar is not None else None
    if isinstance(messages, list):
        msgs = [m for m in messages if isinstance(m, dict)]
        system = [m for m in msgs if m.get("role") == "system"]
        rest = [m for m in msgs if m.get("role") != "system"]
        if system:
            attrs["gen_ai.system_instructions"] = _dump(
                [{"type": "text", "content": _text(m.get("content")) or ""} for m in system])
        attrs["gen_ai.input.messages"] = _dump([_genai_message(m) for m in rest])
        for i, m in enumerate(msgs):
            _flat("llm.input_messages", i, m, attrs)
        last = rest[-1] if rest else None
        if last is not None and _text(last.get("content")) is not None:
            attrs["input.value"] = _text(last.get("content"))
            attrs["input.mime_type"] = "text/plain"
    tools = sidecar.get("tools") if sidecar is not None else None
    if isinstance(tools, list):
        for i, tool in enumerate(tools):
            if isinstance(tool, dict):
                attrs[f"llm.tools.{i}.tool.json_schema"] = _dump(tool)
    if "reply" in record or "tool_calls" in record:
        calls = [c for c in record.get("tool_calls") or [] if isinstance(c, dict)]
        answer: dict[str, Any] = {"role": "assistant", "content": record.get("reply"),
                                  "tool_calls": [{"id": c.get("id"), "function": {
                                      "name": c.get("name"), "arguments": c.get("arguments")}}
                                      for c in calls]}
        out = _genai_message(answer)
        if isinstance(record.get("finish_reason"), str):
            out["finish_reason"] = record["finish_reason"]
        attrs["gen_ai.output.messages"] = _dump([out])
        _flat("llm.output_messages", 0, answer, attrs)
    return attrs
