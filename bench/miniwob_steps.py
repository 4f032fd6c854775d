"""Hand-written built-in-planner steps for the easy MiniWoB++ tasks (`make eval PLANNER=steps`): what a careful
user would write, from the episode's utterance and, where the utterance cannot say which element, the page."""
import json
import re


def _quoted(text):
    """The built-in planner's quoting: "..." unless the text holds a double quote."""
    return f"'{text}'" if '"' in text else f'"{text}"'


def _first(pattern, utterance):
    found = re.search(pattern, utterance)
    if found is None:
        raise ValueError(f"the utterance {utterance!r} does not match {pattern!r}")
    return found.groups() if len(found.groups()) > 1 else found[1]


def _exact_text_selector(page, selector, text):
    """`selector:nth-of-type(n)` for the first of the sibling elements `selector` matches whose text is exactly
    `text` (case matters: MiniWoB puts "Eget" and "eget" side by side, and only one is right)."""
    index = page(f"""return Array.from(document.querySelectorAll({json.dumps(selector)}))
        .findIndex((e) => e.textContent.trim() === {json.dumps(text)});""")
    if index is None or index < 0:
        raise ValueError(f"no {selector} reads {text!r}")
    return f"{selector}:nth-of-type({index + 1})"


def click_test(utterance, page):
    return ['click "#subbtn"']


def click_test_2(utterance, page):
    label = _first(r"Click button (\w+)", utterance)
    return [f"click {_quoted(label)}"]


def click_button(utterance, page):
    text = _first(r'Click on the "(.*)" button', utterance)
    return [f"click {_quoted(_exact_text_selector(page, '#area > button', text))}"]


def click_link(utterance, page):
    text = _first(r'Click on the link "(.*)"', utterance)
    return [f"click {_quoted(_exact_text_selector(page, '#area > span', text))}"]


def focus_text(utterance, page):
    return ['click "#tt"']


def enter_text(utterance, page):
    text = _first(r'Enter "(.*)" into the text field', utterance)
    return [f'type {_quoted(text)} into "#tt"', 'click "#subbtn"']


def click_dialog(utterance, page):
    return ['click ".ui-dialog-titlebar-close"']


def click_checkboxes(utterance, page):
    names = _first(r"Select (.*) and click Submit", utterance)
    steps = []
    if names != "nothing":
        for name in names.split(", "):
            index = page(f"""return Array.from(document.querySelectorAll("#boxes label"))
                .findIndex((label) => label.textContent === {json.dumps(name)});""")
            steps.append(f'click "#ch{index}"')
    return steps + ['click "#subbtn"']


def choose_list(utterance, page):
    item = _first(r"Select (.*) from the list and click Submit", utterance)
    return [f'select {_quoted(item)} in "#options"', 'click "#area > button"']


def login_user(utterance, page):
    user, password = _first(r'username "(.*)" and the password "(.*)" into', utterance)
    return [f'type {_quoted(user)} into "#username"', f'type {_quoted(password)} into "#password"',
            'click "#subbtn"']


def drag_box(utterance, page):
    return ['drag "#draggableSmall" to "#draggableLarge"', 'click "#subbtn"']


ORDINAL = re.compile(r"to the (\d+)(?:st|nd|rd|th) position")


def drag_items(utterance, page):
    """The item onto the one at the place asked for (jQuery UI's sortable: a pointer drag); the drop ends it."""
    name, where = _first(r"Drag (.*) (to the .*|down by one position|up by one position)\.", utterance)
    names = page("""return Array.from(document.querySelectorAll("#sortable li")).map((li) => li.textContent.trim());""")
    now = names.index(name) + 1
    place = {"to the top": 1, "to the bottom": len(names), "down by one position": now + 1,
             "up by one position": now - 1}.get(where) or int(ORDINAL.match(where)[1])
    return [f'drag "#sortable li:nth-child({now})" to "#sortable li:nth-child({place})"']


def use_slider(utterance, page):
    """The handle moved by the pixels between its value and the one asked for (a vertical slider's values go up)."""
    wanted = int(_first(r"Select (-?\d+) with the slider", utterance))
    slider = page("""var s = $("#slider"), o = s.slider("option"), r = s[0].getBoundingClientRect();
        return {value: s.slider("value"), min: o.min, max: o.max, horizontal: o.orientation === "horizontal",
                width: r.width, height: r.height};""")
    share = (wanted - slider["value"]) / (slider["max"] - slider["min"])
    x, y = (share * slider["width"], 0) if slider["horizontal"] else (0, -share * slider["height"])
    return [f'drag "#slider .ui-slider-handle" by {x:.2f},{y:.2f}', 'click "#subbtn"']


PROGRAMS = {
    "click-test": click_test, "click-test-2": click_test_2, "click-button": click_button,
    "click-link": click_link, "focus-text": focus_text, "enter-text": enter_text,
    "click-dialog": click_dialog, "click-checkboxes": click_checkboxes, "choose-list": choose_list,
    "login-user": login_user, "drag-box": drag_box, "drag-items": drag_items, "use-slider": use_slider,
}
