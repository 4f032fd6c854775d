"""What validating against a caller's JSON Schema can cost, measured on its reference graph without expanding it."""
from urllib.parse import unquote

# The documented bounds (docs/response-schemas.md): a schema over them is a 400 at submit.
# Subschemas one value can be checked against, every `$ref` followed, plus the values their enum, const and
# required hold (each compared in turn).
MAX_EXPANDED_NODES = 10_000
MAX_DEPTH = 100  # subschemas on one path, with `$ref`s followed (deeper ones overflow the validator's stack)
MAX_PATTERN_CHARS = 1_000
# Subschemas the document itself holds (objects outside enum/const/default/examples), counted before anything
# else reads it: the 2020-12 metaschema's own check costs about 0.3 ms of the web process's CPU per subschema.
MAX_WRITTEN_SUBSCHEMAS = 1_000

# Keywords whose subschemas apply to the value itself ("in place") or to its members ("down"), with the
# label of the members they apply to: ("o", name) one property, ("o", "*") any property, ("a", ...) items.
IN_PLACE_ONE = ("not", "if", "then", "else")
IN_PLACE_LISTS = ("allOf", "anyOf", "oneOf")
IN_PLACE_MAPS = ("dependentSchemas", "dependencies")  # `dependencies`: a schema, or a list of names (data)
DOWN_ONE = {"additionalProperties": ("o", "*"), "unevaluatedProperties": ("o", "*"), "propertyNames": ("k", "*"),
            "items": ("a", "*"), "additionalItems": ("a", "*"), "unevaluatedItems": ("a", "*"),
            "contains": ("a", "*")}
DOWN_MAPS = {"properties": "o", "patternProperties": "o"}  # patternProperties: any property (its name is a regex)
REFERENCES = ("$ref", "$dynamicRef", "$recursiveRef")
# Data a keyword compares the value with, element by element.
DATA = ("enum", "const", "required", "dependentRequired")
VALUES = ("enum", "const", "default", "examples")  # keywords whose values are data: no subschema in them


def problems(schema):
    """Why checking a value against `schema` could cost more than its documented bounds (empty when nothing)."""
    graph = _Graph(schema)
    found = list(graph.problems)
    if found:
        return found
    in_place = [[target for kind, _, target in edges if kind == "in"] for edges in graph.edges]
    for component in _components(in_place):
        if len(component) > 1 or component[0] in in_place[component[0]]:
            where = ", ".join(sorted(graph.where[n] for n in component)[:3])
            return [f"the $ref cycle through {where} has no base case: every value would be checked against "
                    "it forever (a recursive reference must go down into a property or an item)."]
    components = _components([[target for _, _, target in edges] for edges in graph.edges])
    found += _multiplying(graph, components)
    if found:
        return found
    size, depth = _expanded(graph, components)
    if size > MAX_EXPANDED_NODES:
        found.append(f"its expanded size is over {MAX_EXPANDED_NODES:,} (subschemas with every $ref and allOf/anyOf/"
                     "oneOf followed, plus the values of their enum, const and required), the bound on a response "
                     "schema's size.")
    if depth > MAX_DEPTH:
        found.append(f"it nests deeper than {MAX_DEPTH} subschemas when its $refs are followed, the bound on a "
                     "response schema's depth.")
    return found


class _Graph:
    """Every subschema reachable from the root (references followed once), numbered, with its edges."""

    def __init__(self, root):
        self.root = root
        self.ids, self.nodes, self.where, self.edges, self.weight, self.problems = {}, [], [], [], [], []
        self.anchors = {}  # an $anchor's or $dynamicAnchor's name ("" for $recursiveAnchor) → its subschemas
        self.resource_of = {}  # id(subschema) → the subschema whose "#" its references resolve against
        self._index_anchors(root)
        pending = [self._add(root, "#", root)]
        while pending:
            node = pending.pop()
            self.edges[node] = []
            for kind, label, child, where, resource in self._children(self.nodes[node], self.where[node]):
                known = id(child) in self.ids
                target = self._add(child, where, resource)
                if not known:
                    pending.append(target)
                self.edges[node].append((kind, label, target))

    def _add(self, schema, where, resource):
        if id(schema) not in self.ids:
            self.ids[id(schema)] = len(self.nodes)
            self.nodes.append(schema)
            self.where.append(where)
            self.edges.append([])
            self.weight.append(1 + (_data_size(schema) if isinstance(schema, dict) else 0))
            self.resource_of[id(schema)] = resource
        return self.ids[id(schema)]

    def _index_anchors(self, root):
        stack = [root]
        while stack:
            node = stack.pop()
            if isinstance(node, dict):
                for keyword in ("$anchor", "$dynamicAnchor"):
                    if isinstance(node.get(keyword), str):
                        self.anchors.setdefault(node[keyword], []).append(node)
                if node.get("$recursiveAnchor") is True:
                    self.anchors.setdefault("", []).append(node)
                stack.extend(v for k, v in node.items() if k not in VALUES)
            elif isinstance(node, list):
                stack.extend(node)

    def _children(self, schema, where):
        """(kind, label, subschema, where, resource) for each subschema `schema` applies."""
        if not isinstance(schema, dict):
            return
        resource = schema if "$id" in schema else self.resource_of[id(schema)]
        for key, value in schema.items():
            at = f"{where.rstrip('/')}/{key}"
            if key in IN_PLACE_ONE and _is_schema(value):
                yield "in", None, value, at, resource
            elif key in IN_PLACE_LISTS and isinstance(value, list):
                yield from (("in", None, v, f"{at}/{i}", resource) for i, v in enumerate(value) if _is_schema(v))
            elif key in IN_PLACE_MAPS and isinstance(value, dict):
                yield from (("in", None, v, f"{at}/{k}", resource) for k, v in value.items() if _is_schema(v))
            elif key in DOWN_ONE and _is_schema(value):
                yield "down", DOWN_ONE[key], value, at, resource
            elif key in ("items", "prefixItems") and isinstance(value, list):
                yield from (("down", ("a", i), v, f"{at}/{i}", resource) for i, v in enumerate(value) if _is_schema(v))
            elif key in DOWN_MAPS and isinstance(value, dict):
                for name, sub in value.items():
                    if _is_schema(sub):
                        label = ("o", name) if key == "properties" else ("o", "*")
                        yield "down", label, sub, f"{at}/{name}", resource
            elif key == "pattern" and isinstance(value, str) and len(value) > MAX_PATTERN_CHARS:
                self.problems.append(f"the pattern at {where} is longer than {MAX_PATTERN_CHARS:,} characters, "
                                     "the bound on a response schema's patterns.")
            elif key in REFERENCES and isinstance(value, str):
                for target in self._resolve(key, value, resource, where):
                    yield "in", None, target, self._place(target, value if value.startswith("#/") else at), resource
        if isinstance(schema.get("patternProperties"), dict):
            for pattern in schema["patternProperties"]:
                if len(pattern) > MAX_PATTERN_CHARS:
                    self.problems.append(f"a patternProperties pattern at {where} is longer than "
                                         f"{MAX_PATTERN_CHARS:,} characters, the bound on a response schema's "
                                         "patterns.")

    def _place(self, target, fallback):
        return self.where[self.ids[id(target)]] if id(target) in self.ids else fallback

    def _resolve(self, keyword, ref, resource, where):
        """The subschemas a local reference can lead to (every candidate, for dynamic ones); a reference to
        a published metaschema is a leaf here (a fixed, known schema)."""
        if not ref.startswith("#"):
            return []
        fragment = unquote(ref[1:])
        if keyword == "$recursiveRef":
            return [resource] + self.anchors.get("", [])
        if fragment and not fragment.startswith("/"):
            found = self.anchors.get(fragment, [])
            if not found and keyword == "$ref":
                self.problems.append(f"$ref {ref!r} at {where} names no $anchor of the schema.")
            return found
        node = resource
        for part in fragment.split("/")[1:]:
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                self.problems.append(f"{keyword} {ref!r} at {where} points to nothing in the schema.")
                return []
        return [node] if _is_schema(node) else []


def _is_schema(value):
    return isinstance(value, (dict, bool))


def _data_size(schema):
    """How many values the schema's data keywords hold (what enum/const/required compare one by one)."""
    size, stack = 0, [schema.get(k) for k in DATA if k in schema]
    stack += [v for v in (schema.get("dependencies") or {}).values() if isinstance(v, list)] \
        if isinstance(schema.get("dependencies"), dict) else []
    while stack:
        value = stack.pop()
        size += 1
        if isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return size


def _components(successors):
    """Strongly connected components (Tarjan's, without recursion), sinks first: each a list of node ids."""
    index, low, on_stack, stack, order, counter = {}, {}, set(), [], [], 0
    for start in range(len(successors)):
        if start in index:
            continue
        work = [(start, 0)]
        while work:
            node, position = work.pop()
            if position == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            for i in range(position, len(successors[node])):
                child = successors[node][i]
                if child not in index:
                    work.append((node, i + 1))
                    work.append((child, 0))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    order.append(component)
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
    return order


def _conflict(labels):
    """Two ways into a cycle that can reach the same member: the same property twice, or any-member and another."""
    kinds = [kind for kind, _ in labels]
    return any(count > 1 or name == "*" and kinds.count(kind) > 1 for (kind, name), count in labels.items())


def _multiplying(graph, components):
    """A recursion that checks one member against its cycle twice (two paths into it with the same property,
    or an item schema and another) doubles the work at each level of the value: refused."""
    for members in components:
        if len(members) == 1 and all(t != members[0] for _, _, t in graph.edges[members[0]]):
            continue
        inside = set(members)
        ways = {}  # node → {label: ways (counted to 2)} back into the cycle from it and what applies in place

        def ways_in(node, depth=0):
            if node not in ways and depth <= MAX_DEPTH:
                labels = {}
                for kind, label, target in graph.edges[node]:
                    found = {label: 1} if kind == "down" and target in inside else \
                        ways_in(target, depth + 1) if kind == "in" and target in inside else {}
                    for key, count in found.items():
                        labels[key] = min(2, labels.get(key, 0) + count)
                ways[node] = labels
            return ways.get(node, {})

        for node in members:
            if _conflict(ways_in(node)):
                return [f"the recursive subschema at {graph.where[node]} is applied more than once to the same "
                        "member at each level (checking it would double with each level of the value)."]
    return []


def _expanded(graph, components):
    """(expanded size, depth) of the root, capped just over the bounds: per component, its members once plus
    what each edge out of it expands to (so an allOf chain's doubling is counted, never enumerated)."""
    component_of = {n: i for i, c in enumerate(components) for n in c}
    size, depth = [0] * len(components), [0] * len(components)
    for i, members in enumerate(components):  # sinks first: every edge out leads to a component done before
        total, deepest = sum(graph.weight[n] for n in members), 0
        for node in members:
            for _, _, target in graph.edges[node]:
                j = component_of[target]
                if j != i:
                    total += size[j]
                    deepest = max(deepest, depth[j])
        size[i] = min(total, MAX_EXPANDED_NODES + 1)
        # A cycle counts once: how deep it recurses is the value's depth (the check's stack guard's matter).
        depth[i] = min(deepest + 1, MAX_DEPTH + 1)
    root = component_of[0]
    return size[root], depth[root]
