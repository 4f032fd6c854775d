"""The replay script format (shared by the API and the workers): steps with their pages and locators, parameters,
and the built-in planner text."""
import re
from urllib.parse import urlsplit

FORMAT = "remote-dispatch-script/1"
# The arguments of an action that name an element: the script keeps a locator for each (page.js describe()) under
# the argument's name (`target`; a drag's `source` and, when it drops onto an element, `target`).
ELEMENTS = {"click": ("target",), "type": ("target",), "select": ("target",), "hover": ("target",),
            "upload": ("target",), "drag": ("source", "target"), "draw": ("target",)}
RECORDED = tuple(ELEMENTS) + ("go_to", "read_page", "extract", "press", "scroll", "wait", "wait_for", "go_back",
                              "switch_tab")
# What a run may do that its script leaves out, and why: the answer is kept apart (answer_template); a failure and
# the general tools change nothing in the browser; a question to the user or a person pauses the run, and a paused
# run is not recorded; MCP tool calls are not replayed (docs/replay.md). Any other action must be RECORDED: a test holds every action of the browser
# environment to one of the two, so a new action cannot go missing from replays unnoticed.
NOT_RECORDED = ("answer", "fail", "ask_user", "ask_for_person", "use_tool", "current_time", "read_attachment")
VARIABLE = re.compile(r"\{\{\s*([A-Za-z_][\w.-]*)\s*\}\}")  # an inputVariables parameter
STEP_RESULT = re.compile(r"\{\{step (\d+)\}\}")  # the text a read step returned (answers)
SHORT = 3  # shorter variable values are parameters only where they are a whole argument


def _strings(value, change):
    """`value` with `change` applied to every string nested in it (dicts, lists)."""
    if isinstance(value, dict):
        return {k: _strings(v, change) for k, v in value.items()}
    if isinstance(value, list):
        return [_strings(v, change) for v in value]
    return change(value) if isinstance(value, str) else value


def parameterize(value, variables):
    """Values that came from inputVariables become {{name}} (longest first, so one inside another stays whole)."""
    pairs = sorted(((str(v), n) for n, v in variables.items() if str(v)), key=lambda p: -len(p[0]))

    def change(text):
        for known, name in pairs:
            if text == known:
                return "{{%s}}" % name
        for known, name in pairs:
            if len(known) >= SHORT and known in text:
                text = text.replace(known, "{{%s}}" % name)
        return text
    return _strings(value, change)


def fill(value, variables):
    """{{name}} → the replay's inputVariables value (unknown names stay as written)."""
    return _strings(value, lambda text: VARIABLE.sub(
        lambda m: str(variables[m[1]]) if m[1] in variables else m[0], text))


def answer_template(value, reads):
    """An answer that repeats what a read step returned names that step ({{step N}}), so a replay answers
    with what the page shows now. `reads`: {step number: text it returned}."""
    ordered = sorted(((n, t) for n, t in reads.items() if t and t.strip()), key=lambda item: -len(item[1]))

    def change(text):
        for number, read in ordered:
            text = text.replace(read, "{{step %d}}" % number)
        return text
    return _strings(value, change)


def fill_answer(value, results):
    return _strings(value, lambda text: STEP_RESULT.sub(lambda m: results.get(int(m[1]), ""), text))


def parameters_of(script):
    found = set()
    for step in script.get("steps") or []:
        found.update(VARIABLE.findall(repr(step)))
    return sorted(found)


def secrets_of(script):
    found = set()
    for step in script.get("steps") or []:
        found.update(re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_.-]*)\}", repr(step)))
    return sorted(found)


def same_page(expected, url, title):
    """A step's page check: same scheme, host and path (the query may differ). The title decides only when the
    step has no URL: a page whose title changed (a date, a count, a new wording) at the same URL is the same page,
    and its element is still looked up by its locator."""
    if expected.get("url"):
        want, have = urlsplit(expected["url"]), urlsplit(url or "")
        return (want.scheme, want.netloc, want.path.rstrip("/") or "/") == (
            have.scheme, have.netloc, have.path.rstrip("/") or "/")
    return not expected.get("title") or (expected["title"] or "").strip() == (title or "").strip()


def page_pattern(url):
    parts = urlsplit(url or "")
    return f"{parts.scheme}://{parts.netloc}{parts.path}" if parts.scheme else url


def _quote(text):
    text = str(text)
    return f"'{text}'" if '"' in text else f'"{text}"'


def target_text(step, key="target"):
    """How a person (and the built-in planner) names the step's element (`key`: the argument that names it)."""
    target = step.get(key) or {}
    attrs = target.get("attrs") or {}
    if target.get("name"):
        return target["name"]
    if attrs.get("id"):
        return "#" + attrs["id"]
    return target.get("css") or (step.get("args") or {}).get(key, "")


def points_text(points):
    """[[10, 10], [60, 10]] as 10,10 60,10 (the built-in step's form)."""
    try:
        return " ".join(f"{float(x):g},{float(y):g}" for x, y in points or [])
    except (TypeError, ValueError):
        return str(points)


def _drag_text(step):
    """drag "Item 3" to "Done", or drag "Volume" by 40,0 (the built-in step's two forms)."""
    args, source = step.get("args") or {}, _quote(target_text(step, "source"))
    if step.get("target") or args.get("target") not in (None, ""):
        return f"drag {source} to {_quote(target_text(step))}"
    return f"drag {source} by {float(args.get('x') or 0):g},{float(args.get('y') or 0):g}"


def step_text(step):
    """One step in the built-in planner's grammar (docs/agent.md "Built-in planner")."""
    action, args = step["action"], step.get("args") or {}
    target = _quote(target_text(step))
    return {
        "go_to": lambda: f"go to {args.get('url', '')}",
        "click": lambda: f"click {target}",
        "type": lambda: f"type {_quote(args.get('text', ''))} into {target}",
        "select": lambda: f"select {_quote(args.get('option', ''))} in {target}",
        "hover": lambda: f"hover {target}",
        "drag": lambda: _drag_text(step),
        "draw": lambda: f"draw on {target} through {points_text(args.get('points'))}",
        "upload": lambda: f"upload {_quote(args.get('key', ''))} into {target}",
        "read_page": lambda: "read page",
        "extract": lambda: f"extract {args.get('selector', 'body')}",
        "press": lambda: f"press {args.get('key', '')}",
        "scroll": lambda: "scroll " + {"top": "to top", "bottom": "to bottom"}.get(args.get("direction"),
                                                                                   args.get("direction", "down")),
        "wait": lambda: f"wait {float(args.get('seconds', 0)):g} s",
        "wait_for": lambda: f"wait for {_quote(args.get('text', ''))}",
        "go_back": lambda: "go back",
        "switch_tab": lambda: f"switch to tab {args.get('index', 1)}",
    }[action]()


def as_text(script):
    """The script as a built-in planner prompt. The final answer is the last read's result there; an answer
    that combines several reads is kept only in the JSON form."""
    lines = ["/Operator"]
    steps = script.get("steps") or []
    for number, step in enumerate(steps, 1):
        if step["action"] == "answer":
            text = (step.get("args") or {}).get("text")
            if isinstance(text, str) and text and not STEP_RESULT.search(text):
                lines.append(f"answer {text}")
            continue
        lines.append(step_text(step))
    return "\n".join(lines)
