"""Structured answers: a ``response_format`` that asks for JSON against a schema, sent as
openai expects it, and each answer's text read back into ``Answer.parsed``.

``response_format`` may be a pydantic model class (sent as a strict ``json_schema`` named
after the class, as openai's own ``.parse()`` helper sends it; the answer is validated into
an instance of the class) or a dict ``{"type": "json_schema", "json_schema": {...}}`` (sent
as it is; the answer is the JSON value parsed). Any other ``response_format`` (``text``,
``json_object``) is sent as it is and gives no ``parsed``.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from ._exceptions import InvalidInputError

__all__ = [
    "TEXT_ANSWERS",
    "Structured",
    "merged_format",
    "parse_merged_json",
    "schema_problem",
    "structured_of",
    "wire_params",
]


@dataclass(frozen=True, slots=True)
class Structured:
    """What a request with a JSON schema sends, and how its answer is read back."""

    wire: dict[str, Any]  # the response_format as sent
    model: type[BaseModel] | None  # the class answers are validated into, if one was given
    text: bool = False  # plain-text answers merged as JSON: an item's answer is its text

    def parse(self, text: str | None) -> Any:
        """The answer ``text`` as a validated value; ``ValueError`` saying why it is not."""
        if text is None:
            raise ValueError("the reply holds no text")
        if self.model is not None:
            return self._validated(text)
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"the reply is not JSON: {exc.msg} at {exc.pos}") from None
        return self.value(value)

    def value(self, value: Any) -> Any:
        """A JSON value read against the schema (validated into the class, if one; with a
        dict schema, checked by :func:`schema_problem`)."""
        if self.model is not None:
            return self._validated(json.dumps(value))
        schema = self.schema
        problem = schema_problem(value, schema, schema) if schema else None
        if problem is not None:
            raise ValueError(problem)
        return value

    def _validated(self, text: str) -> BaseModel:
        assert self.model is not None
        try:
            # JSON mode, as a reply's own text is validated: the same rules either way.
            return self.model.model_validate_json(text)
        except ValidationError as exc:
            raise ValueError(_first_error(exc)) from None

    @property
    def schema(self) -> dict[str, Any]:
        spec = self.wire.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, Mapping) else None
        return dict(schema) if isinstance(schema, Mapping) else {}


#: Plain-text questions merged as JSON (``MergePolicy.format``): each item's answer a
#: string, given back as the answer's text, with no ``parsed`` value.
TEXT_ANSWERS = Structured(
    {
        "type": "json_schema",
        "json_schema": {"name": "answer", "schema": {"type": "string"}, "strict": True},
    },
    None,
    text=True,
)


def structured_of(params: Mapping[str, Any]) -> Structured | None:
    """The structured format ``params`` ask for, if their ``response_format`` is one."""
    value = params.get("response_format")
    if isinstance(value, type):
        if not issubclass(value, BaseModel):
            raise InvalidInputError(
                f"response_format must be a pydantic BaseModel class or a dict, "
                f"not the class {value.__name__}"
            )
        return Structured(_model_format(value), value)
    if isinstance(value, Mapping) and value.get("type") == "json_schema":
        return Structured(dict(value), None)
    return None


def wire_params(params: dict[str, Any]) -> dict[str, Any]:
    """``params`` as sent: a pydantic class as ``response_format`` becomes its schema."""
    if isinstance(params.get("response_format"), type):
        structured = structured_of(params)
        assert structured is not None
        return {**params, "response_format": structured.wire}
    return params


def merged_format(structured: Structured, count: int) -> dict[str, Any]:
    """The ``response_format`` of a merged request of ``count`` questions with one schema:
    ``{"answers": [{"id": k, "answer": <the schema>}, ...]}``, exactly ``count`` items, each
    id one of 1..``count`` (the schema's ``$defs`` moved to the root, where its ``$ref``s
    point)."""
    item = dict(structured.schema)
    defs = item.pop("$defs", None)
    # The ids a reply may use: a grammar then cannot write "id": 9 in a merge of 4 (a small
    # model continues counting); a repeated id is still read back as missing.
    ids = list(range(1, count + 1))
    answer_item = {
        "type": "object",
        "properties": {"id": {"type": "integer", "enum": ids}, "answer": item},
        "required": ["id", "answer"],
        "additionalProperties": False,
    }
    answers = {"type": "array", "items": answer_item, "minItems": count, "maxItems": count}
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {"answers": answers},
        "required": ["answers"],
        "additionalProperties": False,
    }
    if defs:
        schema["$defs"] = defs
    return {
        "type": "json_schema",
        "json_schema": {"name": "answers", "schema": schema, "strict": True},
    }


def parse_merged_json(
    text: str, count: int, structured: Structured, *, truncated: bool = False
) -> dict[int, tuple[str, Any]]:
    """A merged reply in the ``merged_format`` shape: each item number 1..``count`` found
    exactly once with an answer that validates, as (its text, its parsed value): the JSON
    text of the answer, or with plain-text answers the string itself (an empty one is not
    an answer). Bad JSON, an id out of range, repeated or missing, or an answer that does
    not validate leaves its items out (they are re-asked alone). A reply cut at its cap
    (``truncated``) gives the items written whole before the cut."""
    try:
        value = json.loads(text)
    except ValueError:
        value = {"answers": _whole_items(text)} if truncated else None
    items = value.get("answers") if isinstance(value, dict) else None
    if not isinstance(items, list):
        return {}
    ids = [i.get("id") if isinstance(i, dict) else None for i in items]
    found: dict[int, tuple[str, Any]] = {}
    for number, item in zip(ids, items, strict=True):
        if not isinstance(number, int) or isinstance(number, bool) or not 1 <= number <= count:
            continue
        if ids.count(number) != 1 or "answer" not in item:
            continue
        try:
            parsed = structured.value(item["answer"])
        except ValueError:
            continue
        if not structured.text:
            found[number] = (json.dumps(item["answer"]), parsed)
        elif parsed.strip():
            found[number] = (parsed.strip(), None)
    return found


_ANSWERS_OPEN = re.compile(r'^\s*\{\s*"answers"\s*:\s*\[')


def _whole_items(text: str) -> list[Any]:
    """The items of a cut ``{"answers": [...`` reply that were written whole."""
    opened = _ANSWERS_OPEN.match(text)
    if opened is None:
        return []
    decoder, at = json.JSONDecoder(), opened.end()
    items: list[Any] = []
    while True:
        at = _skip(text, at, ",")
        try:
            item, at = decoder.raw_decode(text, at)
        except ValueError:
            return items  # the cut item, or the array's end
        items.append(item)


def _skip(text: str, at: int, separator: str) -> int:
    """``at`` past white space and at most one ``separator``."""
    while at < len(text) and text[at].isspace():
        at += 1
    if text.startswith(separator, at):
        at += 1
        while at < len(text) and text[at].isspace():
            at += 1
    return at


def _model_format(model: type[BaseModel]) -> dict[str, Any]:
    return {
        "type": "json_schema",
        "json_schema": {
            "name": model.__name__,
            "schema": _strict(model.model_json_schema()),
            "strict": True,
        },
    }


def _strict(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` as OpenAI's strict mode takes it: every object closed
    (``additionalProperties: false``) with all of its properties required, and no
    ``default: null`` (what openai's ``to_strict_json_schema`` does to a pydantic schema)."""
    schema = copy.deepcopy(schema)
    _close(schema)
    return schema


def _close(node: Any) -> None:
    if isinstance(node, list):
        for item in node:
            _close(item)
        return
    if not isinstance(node, dict):
        return
    if node.get("type") == "object" or "properties" in node:
        node.setdefault("additionalProperties", False)
        node["required"] = list(node.get("properties", {}))
    if "default" in node and node["default"] is None:
        del node["default"]
    for key in ("properties", "$defs", "definitions"):
        for sub in (node.get(key) or {}).values():
            _close(sub)
    for key in ("items", "anyOf", "allOf", "oneOf", "prefixItems"):
        if key in node:
            _close(node[key])


_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
}


def schema_problem(value: Any, schema: Any, root: Any, where: str = "the reply") -> str | None:
    """Why the JSON ``value`` is not valid against ``schema`` (``root`` holds the ``$defs``
    its ``$ref``s point into); None when it is. The keywords strict structured outputs use
    are checked: ``type``, ``enum``, ``const``, ``properties``, ``required``,
    ``additionalProperties: false``, ``items``, ``minItems``/``maxItems``,
    ``minLength``/``maxLength``, ``pattern``, ``minimum``/``maximum``, ``anyOf``/``oneOf``
    (one option valid), ``allOf``, local ``$ref``; any other keyword is not checked."""
    if not isinstance(schema, dict):
        return None
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        target: Any = root
        for part in ref[2:].split("/"):
            target = target.get(part) if isinstance(target, dict) else None
        return schema_problem(value, target, root, where)
    if "const" in schema and value != schema["const"]:
        return f"{where}: must be {json.dumps(schema['const'])}"
    if isinstance(schema.get("enum"), list) and value not in schema["enum"]:
        return f"{where}: must be one of {json.dumps(schema['enum'])}"
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if (
            isinstance(options, list)
            and options
            and all(schema_problem(value, o, root, where) for o in options)
        ):
            return f"{where}: matches none of its {key} options"
    for option in schema.get("allOf") or []:
        problem = schema_problem(value, option, root, where)
        if problem:
            return problem
    kinds = schema.get("type")
    if kinds is not None:
        names = kinds if isinstance(kinds, list) else [kinds]
        if not any(_is(value, str(name)) for name in names):
            return f"{where}: not of type {' or '.join(map(str, names))}"
    if isinstance(value, dict):
        return _object_problem(value, schema, root, where)
    if isinstance(value, list):
        return _array_problem(value, schema, root, where)
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            return f"{where}: shorter than {schema['minLength']} characters"
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            return f"{where}: longer than {schema['maxLength']} characters"
        pattern = schema.get("pattern")
        if isinstance(pattern, str) and re.search(pattern, value) is None:
            return f"{where}: does not match the pattern {pattern!r}"
    elif isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            return f"{where}: under the minimum {schema['minimum']}"
        if "maximum" in schema and value > schema["maximum"]:
            return f"{where}: over the maximum {schema['maximum']}"
    return None


def _is(value: Any, name: str) -> bool:
    if isinstance(value, bool) and name != "boolean":
        return False
    if name == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, _TYPES.get(name, object))


def _object_problem(
    value: dict[str, Any], schema: dict[str, Any], root: Any, where: str
) -> str | None:
    properties = schema.get("properties") or {}
    for name in schema.get("required") or []:
        if name not in value:
            return f"{where}: {name!r} is missing"
    for name, item in value.items():
        if name in properties:
            problem = schema_problem(item, properties[name], root, f"{where}.{name}")
            if problem:
                return problem
        elif schema.get("additionalProperties") is False:
            return f"{where}: {name!r} is not allowed"
    return None


def _array_problem(value: list[Any], schema: dict[str, Any], root: Any, where: str) -> str | None:
    if len(value) < schema.get("minItems", 0):
        return f"{where}: fewer than {schema['minItems']} items"
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        return f"{where}: more than {schema['maxItems']} items"
    for index, item in enumerate(value):
        problem = schema_problem(item, schema.get("items"), root, f"{where}[{index}]")
        if problem:
            return problem
    return None


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"]) or "the reply"
    return f"{where}: {error['msg']}"
