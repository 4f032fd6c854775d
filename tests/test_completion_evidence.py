"""The completion check's evidence rules (workers/agent/completion.py): what a model's trace shows against 'done'."""
from workers.agent.completion import evidence


def step(action, target=None, **extra):
    entry = {"url": "http://127.0.0.1/", "action": action, "startTs": "t", "endTs": "t", "durationMs": 0, **extra}
    return {**entry, "target": target} if target else entry


def test_a_repeat_needs_an_action_on_each_name_the_task_quotes():
    task = 'Click on the "No" button.'
    wrong = [step('click "1"', "[1] <button> submit")]
    assert evidence(task, wrong, repeat=True).reason == 'No action acted on "No", which the task names.'
    assert evidence(task, [step('click "3"', "[3] <button> No")], repeat=True) is None
    # Words, not letters: "No" is not in "None"; case and spacing do not matter; typed and chosen text count.
    assert evidence(task, [step('click "2"', "[2] <button> None")], repeat=True) is not None
    assert evidence('Press “Log  in”', [step('click "4"', "[4] <a> log in")], repeat=True) is None
    assert evidence('Enter "Kasie" into the field.', [step('type Kasie into "1"', "[1] <input>")], repeat=True) is None
    # A one-character name is an icon more often than text (a dialog's "x" is a button that says Close).
    assert evidence('Close the dialog by clicking the "x".', [step('click "5"', "[5] <button> Close")],
                    repeat=True) is None
    # An answer is evidence of its own: the model's check judges it, these names do not.
    assert evidence(task, wrong, repeat=False) is None


def test_what_does_not_count_as_acting_on_the_page():
    task = 'Click "Send".'
    failed = step('click "Send"', failed=True, error="No element matches")
    checked = step('completion check: not done (…)', check={"done": False})
    person = step('a person: click "Send"', by="a person")
    assert evidence(task, [step('click "1"', "[1] <button> Other"), failed, checked, person],
                    repeat=True).reason == 'No action acted on "Send", which the task names.'
    # Nothing acted on the page: a task that asks for an action is not done; a question may be answered from the
    # page it starts on (a kept session's, a window's).
    assert evidence(task, [step("answer"), step("current time")], repeat=False).reason == (
        "No action was taken on the page, and the task asks to click.")
    assert evidence("What does the page say?", [step("answer")], repeat=False) is None


def test_a_field_filled_in_last_is_not_a_task_that_asks_to_submit():
    fill = [step('click "1"', "[1] <input> Name"), step('type Ada into "1"', "[1] <input> Name")]
    for task, verb in (("Enter Ada and press Submit.", "press"), ("Type Ada, then sign in.", "sign in"),
                       ("Fill in the name and submit the form", "submit")):
        verdict = evidence(task, fill, repeat=False)
        assert not verdict.done and verdict.reason.endswith(f"the task asks to {verb}.")
    assert evidence("Enter Ada into the name field.", fill, repeat=False) is None  # nothing to submit
    assert evidence("Enter Ada and press Submit.", fill + [step('click "2"', "[2] <button> Submit")],
                    repeat=False) is None


def test_a_repeat_needs_an_action_on_each_element_the_task_names_by_its_label():
    page = ("clicked [1] <input> UT\nURL: http://127.0.0.1/\nTitle: Boxes\nSelect ZrLIee, 3mJ5 and click Submit.\n"
            '[1]<input type="checkbox" checked>UT</input>\n[2]<input type="checkbox">ZrLIee</input>\n'
            '[3]<input type="checkbox">3mJ5</input>\n[4]<button id="subbtn">Submit</button>\n[5]<button>No</button>')
    task = "Select ZrLIee, 3mJ5 and click Submit. Tick no other box."
    clicks = [step('click "2"', "[2] <input> ZrLIee"), step('click "3"', "[3] <input> 3mJ5")]
    assert evidence(task, [step('click "1"', "[1] <input> UT")], repeat=True, page=page).reason == (
        'No action acted on "ZrLIee", which the task names.')
    assert evidence(task, clicks, repeat=True, page=page).reason == 'No action acted on "Submit", which the task names.'
    # Every named element acted on; "no" in the task is a word, not the button labelled "No" (labels count as
    # the page writes them).
    assert evidence(task, clicks + [step('click "4"', "[4] <button> Submit")], repeat=True, page=page) is None
    assert evidence("select zrliee", [step('click "1"', "[1] <input> UT")], repeat=True, page=page) is None


def test_a_task_that_asks_to_drag_or_draw_is_not_done_by_clicks():
    clicks = [step('click "1"', "[1] <div> box"), step('click "2"', "[2] <button> Submit")]
    for task, verb in (("Drag the smaller box into the larger box.", "drag"),
                       ("Draw a circle centered around the marked point by dragging the mouse.", "draw"),
                       ("Draw a vertical line that runs through the dot, then press submit.", "draw")):
        verdict = evidence(task, clicks, repeat=False)
        assert not verdict.done and verdict.reason == (
            f"The task asks to {verb}, and no action of this agent drags or draws.")
    # Not a gesture: a drop-down, a number drawn by ticking boxes, a button labelled Drag, a file dropped in by the
    # upload action.
    assert evidence("Choose Blue from the drop-down.", clicks, repeat=False) is None
    assert evidence('Draw the number "7" in the checkboxes and press Submit.', clicks, repeat=False) is None
    page = 'URL: http://127.0.0.1/\nTitle: Moves\n[1]<button>Drag</button>'
    assert evidence("Press Drag.", [step('click "1"', "[1] <button> Drag")], repeat=False, page=page) is None
    assert evidence("Drop the report into the box.", [step('upload report.pdf into "3"', "[3] <input>")],
                    repeat=False) is None


def test_a_repeat_of_one_action_does_not_do_a_task_of_steps():
    submit = step('click "4"', "[4] <button> submit")
    for task in ("Find and click on the center of the circle, then press submit.",
                 "Expand the section below and click submit.", "Select all the shades of blue and press Submit."):
        assert evidence(task, [submit, submit], repeat=True).reason == (
            "The task asks for more than one step, and one action was all that was done."), task
        assert evidence(task, [step('click "3"', "[3] <circle>"), submit, submit], repeat=True) is None
        assert evidence(task, [submit], repeat=False) is None  # an answer: the model's check judges it
    assert evidence("Click on the submit button.", [submit, submit], repeat=True) is None
    assert evidence("Select nothing and click Submit.", [submit, submit], repeat=True) is None  # one step is no-op


def test_a_repeat_that_only_opened_the_page_or_answered_nothing_is_not_done():
    opened = [step("go to http://127.0.0.1/book"), step("go to http://127.0.0.1/book")]
    for task in ("Book the shortest flight to Lyon.", "Enter 7:55 PM as the time and press submit.",
                 "Keep the mouse hovered over the colored square."):
        assert evidence(task, opened, repeat=True).reason == (
            "The actions only opened, scrolled or read the page, and the task asks for more."), task
    assert evidence("Go to http://127.0.0.1/book", opened, repeat=True) is None  # opening it was the task
    assert evidence("Open the bookings and scroll down.", opened + [step("scroll down")], repeat=True) is None
    # A question is answered by `answer`: a repeat gives none. Nor do waits, again and again.
    assert evidence("Open the bookings: how many are there?", opened, repeat=True).reason == (
        "The task asks a question, and no answer was given.")
    assert evidence("How many large rectangles are there?", [step("wait 24 s"), step("wait 24 s")],
                    repeat=True).reason == "No action was taken on the page, and no answer was given."
