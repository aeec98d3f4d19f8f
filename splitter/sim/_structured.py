"""Structured replies: JSON for a ``response_format``, and tool calls when tools are offered.

Every value is a pure function of the schema and the prompt's answers, so a reply repeats
exactly. ``json_object`` mode answers ``{"answer": ...}`` for one question and
``{"answers": [{"id": k, "answer": ...}, ...]}`` for several. ``json_schema`` mode fills the
schema (``$ref``/``$defs``, ``anyOf``, objects, arrays, strings, numbers, booleans, enums,
``const``), within its bounds:

* an array of objects with ``id`` and ``answer`` properties (the merged-answers shape) gets
  one item per question of the prompt, each with its question's number and answer (as many
  as ``minItems``/``maxItems`` allow);
* a property named ``answer`` (anywhere else) holds the prompt's first answer; ``id`` the first
  question's number;
* other strings are a few words seeded by the property's path, cut to ``maxLength``; numbers
  are the ``minimum`` (else 1); other arrays have ``minItems`` items (at least 1, at most
  ``maxItems``); a boolean and an enum are drawn from the path's hash.

Tool calls (the choice rule): a function is called when the last user message names it (its
name, or its name with ``_`` read as spaces, any case) and no tool result has come back since,
or when ``tool_choice`` requires it (``"required"`` calls the first function, a named choice
that one); ``tool_choice="none"`` calls nothing. Its arguments fill its ``parameters`` schema.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["Item", "chosen_tools", "json_reply", "schema_value", "tool_arguments"]

Item = tuple[int, str]  # (question number, its answer)
_WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel")


def _digest(path: str) -> int:
    return int.from_bytes(hashlib.sha256(path.encode()).digest()[:4], "big")


def json_reply(schema: dict[str, Any], items: Sequence[Item]) -> str:
    """The reply's JSON text: ``schema`` ``{}`` is json_object mode."""
    if not schema:
        if len(items) == 1:
            return json.dumps({"answer": items[0][1]})
        return json.dumps({"answers": [{"id": k, "answer": a} for k, a in items]})
    return json.dumps(schema_value(schema, items))


def schema_value(schema: dict[str, Any], items: Sequence[Item], root: Any = None) -> Any:
    """A value valid against ``schema`` (``root`` holds the ``$defs`` refs point into)."""
    return _Filler(root if root is not None else schema, items).fill(schema, "$")


class _Filler:
    def __init__(self, root: Any, items: Sequence[Item]) -> None:
        self.root = root
        self.items = list(items) or [(1, "")]

    def fill(self, schema: Any, path: str) -> Any:
        schema = self._resolve(schema)
        if not isinstance(schema, dict):
            return None
        if "const" in schema:
            return schema["const"]
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            if path.endswith(".id") and self.items[0][0] in schema["enum"]:
                return self.items[0][0]  # an item's id, limited to 1..count: its number
            return schema["enum"][_digest(path) % len(schema["enum"])]
        options = schema.get("anyOf") or schema.get("oneOf")
        if isinstance(options, list) and options:
            return self.fill(options[0], path)
        kind = schema.get("type", "object" if "properties" in schema else "string")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), "null")
        return self._typed(kind, schema, path)

    def _typed(self, kind: str, schema: dict[str, Any], path: str) -> Any:
        name = path.rsplit(".", 1)[-1]
        if kind == "object":
            properties = schema.get("properties") or {}
            return {key: self.fill(sub, f"{path}.{key}") for key, sub in properties.items()}
        if kind == "array":
            return self._array(schema, path)
        if kind in ("integer", "number"):
            if name == "id":
                return self.items[0][0]
            low = schema.get("minimum", schema.get("exclusiveMinimum", 0) + 1)
            return int(low) if kind == "integer" else float(low)
        if kind == "boolean":
            return _digest(path) % 2 == 0
        if kind == "null":
            return None
        text = self.items[0][1] if name == "answer" else self._words(path)
        return _bounded(text, schema)

    def _array(self, schema: dict[str, Any], path: str) -> list[Any]:
        low, high = schema.get("minItems", 1), schema.get("maxItems")
        item_schema = self._resolve(schema.get("items", {}))
        props = item_schema.get("properties", {}) if isinstance(item_schema, dict) else {}
        if "id" in props and "answer" in props:
            count = len(self.items) if high is None else min(high, len(self.items))
            count = max(count, low)
            chosen = [self.items[i % len(self.items)] for i in range(count)]
            return [self._answer_item(item_schema, item, path) for item in chosen]
        count = max(low, 1) if high is None else min(max(low, 1), high)
        return [self.fill(item_schema, f"{path}[{i}]") for i in range(count)]

    def _answer_item(self, schema: dict[str, Any], item: Item, path: str) -> dict[str, Any]:
        saved, self.items = self.items, [item]
        try:
            return dict(self.fill(schema, f"{path}[{item[0]}]"))
        finally:
            self.items = saved

    def _words(self, path: str) -> str:
        seed = _digest(path)
        return " ".join(_WORDS[(seed >> (3 * i)) % len(_WORDS)] for i in range(3))

    def _resolve(self, schema: Any) -> Any:
        while isinstance(schema, dict) and isinstance(schema.get("$ref"), str):
            target: Any = self.root
            for key in schema["$ref"].removeprefix("#/").split("/"):
                target = target.get(key) if isinstance(target, dict) else None
            schema = target
        return schema


def _bounded(text: str, schema: dict[str, Any]) -> str:
    limit = schema.get("maxLength")
    text = text if limit is None else text[:limit]
    return text.ljust(schema.get("minLength", 0), "x")


def _mentions(text: str, name: str) -> bool:
    lowered = text.lower()
    return name.lower() in lowered or name.replace("_", " ").lower() in lowered


def chosen_tools(
    tools: Sequence[dict[str, Any]],
    tool_choice: str | dict[str, Any],
    user_text: str,
    answered: bool,
) -> list[dict[str, Any]]:
    """The functions the model calls, in the order offered (the rule in the docstring)."""
    if not tools or tool_choice == "none":
        return []
    if isinstance(tool_choice, dict):
        wanted = (tool_choice.get("function") or tool_choice).get("name")
        return [t for t in tools if t["name"] == wanted][:1]
    if answered:
        return []
    named = [t for t in tools if _mentions(user_text, t["name"])]
    if not named and tool_choice == "required":
        return list(tools[:1])
    return named


def tool_arguments(tool: dict[str, Any], items: Sequence[Item]) -> str:
    """The call's arguments: its ``parameters`` schema filled, as JSON text."""
    return json.dumps(schema_value(tool["parameters"] or {"type": "object"}, items))
