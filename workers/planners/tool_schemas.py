"""Tool JSON Schemas as servers that compile them into grammars accept them (llama.cpp, vLLM, Ollama).

Those converters know types, properties, items, enums, unions and local `$ref`s; a subschema with
none of these (only a title or a description, as MCP servers often send for "any value"), a `$ref`
they cannot resolve, or a regex `pattern` beyond their dialect makes the whole request fail. The
model gets the schema reduced to what they compile; arguments are still validated against the full
schema before anything runs.
"""
ANY_TYPE = ["string", "number", "integer", "boolean", "object", "array", "null"]
# Keys that give a subschema a shape a grammar converter understands.
SHAPED = ("type", "properties", "items", "prefixItems", "anyOf", "oneOf", "allOf", "enum", "const", "$ref",
          "additionalProperties")
DROPPED = ("pattern", "patternProperties", "$schema", "$id", "not", "if", "then", "else", "dependentSchemas",
           "dependentRequired", "unevaluatedProperties", "propertyNames", "contains")
SUBSCHEMA = ("items", "additionalProperties", "not")
SUBSCHEMA_MAPS = ("properties", "$defs", "definitions")
SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
# A response schema's definitions, moved to the answer tool's parameters' root: llama.cpp's converter cannot
# resolve a recursive reference into definitions nested under a property (a tree's "#/$defs/node").
HOISTED = ("$defs", "definitions")


def grammar_safe(schema, base="#", kept=()):
    """A copy of `schema` that grammar converters accept; `base` is where it sits in the tool's parameters
    (its local `$ref`s are rewritten to point there, except those into `kept`, its root's keys moved to the
    parameters' root)."""
    if schema is True or schema == {}:
        return {"type": ANY_TYPE}
    if not isinstance(schema, dict):
        return {"type": ANY_TYPE}
    out = {}
    for key, value in schema.items():
        if key in DROPPED:
            continue
        if key == "$ref":
            if not (isinstance(value, str) and value.startswith("#")):
                return {"type": ANY_TYPE}  # a remote or relative reference: nothing to compile it from
            out[key] = value if value.startswith(tuple(f"#/{k}/" for k in kept)) else base + value[1:]
        elif key in SUBSCHEMA and isinstance(value, (dict, bool)):
            out[key] = value if value is False or (key == "additionalProperties" and value is True) \
                else grammar_safe(value, base, kept)
        elif key in SUBSCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: grammar_safe(sub, base, kept) for name, sub in value.items()}
        elif key in SUBSCHEMA_LISTS and isinstance(value, list):
            out[key] = [grammar_safe(sub, base, kept) for sub in value]
        elif key == "type" and isinstance(value, list) and not value:
            continue
        else:
            out[key] = value
    if "enum" in out and not out["enum"]:
        del out["enum"]  # an empty enum compiles to an empty rule
    if not any(key in out for key in SHAPED):
        out["type"] = ANY_TYPE
    return out


def answer_parameters(schema):
    """The answer tool's parameters around a response schema: `content`, the schema, its definitions hoisted."""
    content = grammar_safe(schema, base="#/properties/content", kept=HOISTED)
    out = {"type": "object", "properties": {"content": content}, "required": ["content"]}
    for key in HOISTED:
        if isinstance(schema, dict) and isinstance(schema.get(key), dict):
            out[key] = content.pop(key)
    return out


def parameters(schema):
    """A tool's parameters: an object schema, grammar-safe."""
    safe = grammar_safe(schema if isinstance(schema, dict) else {})
    if safe.get("type") != "object":
        safe = {**safe, "type": "object"}
    safe.setdefault("properties", {})
    return safe
