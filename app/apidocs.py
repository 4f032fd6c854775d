"""docs/api.md: the API reference in Markdown, generated from the OpenAPI document (`make docs`;
a test fails when the checked-in file drifts)."""

METHODS = ("get", "post", "put", "patch", "delete")


def _type(schema):
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[1]
        return f"[{name}](#{name.lower()})"
    if "anyOf" in schema:  # e.g. a nullable nested object: null or a reference
        kinds = [_type(s) for s in schema["anyOf"] if s.get("enum") != [None]]
        return " or ".join(kinds) + (" or null" if len(kinds) < len(schema["anyOf"]) else "")
    kind = schema.get("type", "any")
    if kind == "array":
        kind = f"array of {_type(schema.get('items', {}))}"
    elif kind == "object" and "additionalProperties" in schema:
        kind = f"object of {_type(schema['additionalProperties'])}"
    if "enum" in schema:
        kind += " (" + ", ".join(f"`{value}`" for value in schema["enum"]) + ")"
    if schema.get("format"):
        kind += f", {schema['format']}"
    return kind


def _cell(text):
    return " ".join(str(text or "").split()).replace("|", "\\|")


def _rules(schema):
    rules = []
    for key, label in (("minLength", "min length"), ("maxLength", "max length"), ("minimum", "min"),
                       ("maximum", "max"), ("minItems", "min items"), ("maxItems", "max items"),
                       ("pattern", "pattern")):
        if key in schema:
            rules.append(f"{label} {schema[key]}")
    if "default" in schema:
        rules.append(f"default `{schema['default']}`")
    if schema.get("nullable"):
        rules.append("may be null")
    return "; ".join(rules)


def markdown(spec):
    out = [f"# {spec['info']['title']} API reference (version {spec['info']['version']})", "",
           "Generated from the OpenAPI document (`openapi.json`, served at `/openapi.json`) by "
           "`make docs`; do not edit by hand. Every call needs the `x-api-key` header; every error "
           "body is [Error](#error).", "", "## Operations", ""]
    for path, item in spec["paths"].items():
        for method in METHODS:
            op = item.get(method)
            if op is None:
                continue
            out += [f"### {method.upper()} `{path}`", "", f"**{op.get('summary', '')}**", ""]
            if op.get("description"):
                out += [op["description"].strip(), ""]
            params = op.get("parameters", [])
            if params:
                out += ["| parameter | in | type | required | description |", "|---|---|---|---|---|"]
                out += [f"| `{p['name']}` | {p['in']} | {_type(p.get('schema', {}))} | "
                        f"{'yes' if p.get('required') else 'no'} | {_cell(p.get('description'))} |" for p in params]
                out.append("")
            body = op.get("requestBody", {}).get("content", {}).get("application/json")
            if body:
                out += [f"Request body: {_type(body['schema'])}", ""]
            out += ["| status | meaning | body |", "|---|---|---|"]
            for status, response in sorted(op["responses"].items()):
                if status == "default" and not response.get("description"):
                    continue
                schema = response.get("content", {}).get("application/json", {}).get("schema")
                out.append(f"| {status} | {_cell(response.get('description'))} | {_type(schema) if schema else ''} |")
            out.append("")
    out += ["## Schemas", ""]
    for name, schema in sorted(spec["components"]["schemas"].items()):
        out += [f"### {name}", ""]
        if schema.get("description"):
            out += [schema["description"], ""]
        required = set(schema.get("required", []))
        props = schema.get("properties", {})
        if props:
            out += ["| field | type | required | rules | description |", "|---|---|---|---|---|"]
            out += [f"| `{field}` | {_type(prop)} | {'yes' if field in required else 'no'} | {_cell(_rules(prop))} | "
                    f"{_cell(prop.get('description'))} |" for field, prop in props.items()]
        else:
            out.append(_type(schema))
        out.append("")
    return "\n".join(out).rstrip() + "\n"
