"""The completion check's evidence (workers/agent/completion.py): what the trace and the page show against 'done'.

Every scenario runs twice, on an English task and page and on the same task and page in German: the evidence reads
no words of the task's language (quotes, question marks, the page's own labels, the page before and after), so
both are judged alike."""
import pytest

from workers.agent.completion import evidence, page_part

LANGUAGES = ("en", "de")
# The same tasks and pages in two languages.
WORDS = {
    "en": {"yes": "Yes", "no": "No", "none": "None", "submit": "Submit", "buy": "Buy", "price": "Price: 12 EUR",
           "click_no": 'Click on the "No" button.', "click": "Click the button.", "click_me": "Click Me!",
           "boxes": "Select ZrLIee, 3mJ5 and click Submit. Tick no other box.",
           "enter": 'Enter "Ada" and press Submit.', "enter_only": 'Enter "Ada" into the name field.',
           "question": "What is the price?", "how_many": "How many large rectangles are there?",
           "drag": "Drag the smaller box into the larger box.", "send": "Send the form.",
           "book": "Book the shortest flight to Lyon.", "go": "Go to http://127.0.0.1/book", "sent": "Sent!"},
    "de": {"yes": "Ja", "no": "Nein", "none": "Keine", "submit": "Absenden", "buy": "Kaufen",
           "price": "Preis: 12 EUR", "click_no": "Klicke auf die Schaltfläche „Nein“.",
           "click": "Klicke auf die Schaltfläche.", "click_me": "Klick mich!",
           "boxes": "Wähle ZrLIee, 3mJ5 aus und klicke auf Absenden. Kreuze kein anderes Kästchen an.",
           "enter": "Gib „Ada“ ein und drücke auf Absenden.", "enter_only": "Gib „Ada“ in das Namensfeld ein.",
           "question": "Wie hoch ist der Preis?", "how_many": "Wie viele große Rechtecke gibt es?",
           "drag": "Ziehe das kleinere Kästchen in das größere.", "send": "Sende das Formular ab.",
           "book": "Buche den kürzesten Flug nach Lyon.", "go": "Öffne http://127.0.0.1/book", "sent": "Gesendet!"},
}


@pytest.fixture(params=LANGUAGES)
def w(request):
    return WORDS[request.param]


def step(action, target=None, **extra):
    entry = {"url": "http://127.0.0.1/", "action": action, "startTs": "t", "endTs": "t", "durationMs": 0, **extra}
    return {**entry, "target": target} if target else entry


def view(*lines, text=""):
    """A page view as page.js writes it: URL, title, visible text, numbered elements."""
    return "\n".join(["URL: http://127.0.0.1/", "Title: Page", *([text] if text else []), *lines])


def buttons(w):
    return view(f"[1]<button>{w['yes']}</button>", f"[2]<button>{w['no']}</button>",
                f"[3]<button>{w['none']}</button>")


def test_an_element_the_task_quotes_must_be_acted_on_by_an_answer_and_a_repeat(w):
    task, page = w["click_no"], buttons(w)
    wrong = [step('click "1"', f"[1] <button> {w['yes']}")]
    for repeat in (True, False):
        verdict = evidence(task, wrong, repeat=repeat, page=page)
        assert not verdict.done and verdict.reason == f'No action acted on "{w["no"]}", which the task names.'
        assert evidence(task, [step('click "2"', f"[2] <button> {w['no']}")], repeat=repeat, page=page) is None
    # Words, not letters: "No" is not in "None" (nor "Nein" in "Keine"); case and spacing do not matter.
    assert evidence(task, [step('click "3"', f"[3] <button> {w['none']}")], repeat=True, page=page) is not None
    assert evidence(task, [step('click "2"', f"[2] <button> {w['no'].upper()}")], repeat=True, page=page) is None
    # A one-character name is an icon more often than text (a dialog's "x" is a button that says Close).
    assert evidence('Close the dialog: click the "x".', [step('click "5"', "[5] <button> Close")], repeat=True,
                    page=view("[5]<button>x</button>")) is None


def test_a_quoted_name_no_element_carries_is_judged_on_a_repeat_only(w):
    # 'Enter "Ada"': typed, it was acted on; not typed, a repeat shows it missing, an answer goes to the model.
    page = view('[1]<input type="text" name="name"></input>')
    typed = [step('type Ada into "1"', "[1] <input>")]
    assert evidence(w["enter_only"], typed, repeat=True, page=page) is None
    clicked = [step('click "1"', "[1] <input>")]
    assert evidence(w["enter_only"], clicked, repeat=True, page=page).reason == (
        'No action acted on "Ada", which the task names.')
    assert evidence(w["enter_only"], clicked, repeat=False, page=page) is None


def test_an_element_the_task_names_by_its_label_as_the_page_writes_it_must_be_acted_on(w):
    page = view('[1]<input type="checkbox" checked>UT</input>', '[2]<input type="checkbox">ZrLIee</input>',
                '*[3]<input type="checkbox">3mJ5</input>', f'[4]<button id="subbtn">{w["submit"]}</button>',
                f"[5]<button>{w['no']}</button>")
    task = w["boxes"]
    clicks = [step('click "2"', "[2] <input> ZrLIee"), step('click "3"', "[3] <input> 3mJ5")]
    for repeat in (True, False):
        assert evidence(task, [step('click "1"', "[1] <input> UT")], repeat=repeat, page=page).reason == (
            'No action acted on "ZrLIee", which the task names.')
        # A new element (`*[3]`) is named as well as one seen before.
        assert evidence(task, clicks[:1], repeat=repeat, page=page).reason == (
            'No action acted on "3mJ5", which the task names.')
        assert evidence(task, clicks, repeat=repeat, page=page).reason == (
            f'No action acted on "{w["submit"]}", which the task names.')
        # Every named element acted on; "no" ("kein") in the task is a word, not the button labelled No (Nein):
        # labels count as the page writes them.
        done = clicks + [step('click "4"', f"[4] <button> {w['submit']}")]
        assert evidence(task, done, repeat=repeat, page=page) is None
    assert evidence(task.lower(), [step('click "1"', "[1] <input> UT")], repeat=True, page=page) is None


def test_a_field_filled_in_last_does_not_press_the_button_the_task_names(w):
    page = view('[1]<input type="text" name="name" value="Ada"></input>', f"[2]<button>{w['submit']}</button>")
    fill = [step('click "1"', "[1] <input> Name"), step('type Ada into "1"', "[1] <input> Name")]
    verdict = evidence(w["enter"], fill, repeat=False, page=page)
    assert not verdict.done and verdict.reason == f'No action acted on "{w["submit"]}", which the task names.'
    submitted = fill + [step('click "2"', f"[2] <button> {w['submit']}")]
    assert evidence(w["enter"], submitted, repeat=False, page=page) is None
    assert evidence(w["enter_only"], fill, repeat=False, page=page) is None  # nothing to press


def test_no_action_on_a_page_with_elements_needs_an_answer_the_page_bears_out(w):
    page = view(f"[1]<button>{w['click_me']}</button>", text=w["click"])
    nothing = [step("answer"), step("current time")]
    reason = ("No action was taken on the page, which offered elements to act on, and the answer names nothing "
              "the page shows that bears it out.")
    assert evidence(w["click"], nothing, repeat=False, page=page).reason == reason
    # A button's label or the task's own words (the page may show the task) bear nothing out.
    assert evidence(w["click"], nothing, repeat=False, page=page, expect=w["click_me"]).reason == reason
    assert evidence(w["click"], nothing, repeat=False, page=page, expect=w["click"]).reason == reason
    # A question answered from the page it starts on: the answer names the text it read there.
    shop = view(f"[1]<a>{w['buy']}</a>", text=w["price"])
    assert evidence(w["question"], nothing, repeat=False, page=shop, expect="12 EUR") is None
    assert evidence(w["question"], nothing, repeat=False, page=shop).reason == reason
    assert evidence(w["question"], nothing, repeat=False, page=shop, expect=w["buy"]).reason == reason
    # A page with nothing to act on holds no evidence either way: the model's check judges.
    assert evidence(w["question"], nothing, repeat=False, page=view(text=w["price"])) is None


def test_an_answer_that_expects_what_the_page_does_not_show_is_not_done(w):
    page = view(f"[1]<button>{w['submit']}</button>", text=w["sent"])
    clicked = [step('click "1"', f"[1] <button> {w['submit']}")]
    assert evidence(w["send"], clicked, repeat=False, page=page, expect=w["sent"]) is None
    assert evidence(w["send"], clicked, repeat=False, page=page, expect=f"  {w['sent'].upper()} ") is None
    verdict = evidence(w["send"], clicked, repeat=False, page=view(f"[1]<button>{w['submit']}</button>"),
                       expect=w["sent"])
    assert not verdict.done and verdict.reason == f'The answer expects the page to show "{w["sent"]}", and it does not.'


def test_an_answer_after_an_action_that_changed_nothing_on_the_page_is_not_done(w):
    page = view(f"[1]<button>{w['submit']}</button>", '[2]<input type="text"></input>')
    clicked = [step('click "1"', f"[1] <button> {w['submit']}")]
    assert evidence(w["send"], clicked, repeat=False, page=page, unchanged=True).reason == (
        'The last action (click "1") changed nothing on the page.')
    assert evidence(w["send"], clicked, repeat=False, page=page, unchanged=False) is None
    # A click on a text field focuses it, which no page view shows.
    focused = [step('click "2"', "[2] <input>")]
    assert evidence(w["send"], focused, repeat=False, page=page, unchanged=True) is None
    # Opening or reading a page need not change it (the kept session was on that page already).
    reopened = [step("go to http://127.0.0.1/"), step("extract h1")]
    assert evidence(w["question"], reopened, repeat=False, page=page, unchanged=True) is None


def test_a_task_that_asks_to_drag_is_judged_by_what_was_done_not_by_its_verb(w):
    page = view("[1]<div>A</div>", "[2]<div>B</div>")
    dragged = [step('drag "1" to "2"', "[1] <div> A")]
    assert evidence(w["drag"], dragged, repeat=False, page=page) is None


def test_what_does_not_count_as_acting_on_the_page(w):
    task, page = w["click_no"], buttons(w)
    failed = step(f'click "{w["no"]}"', failed=True, error="No element matches")
    checked = step("completion check: not done (…)", check={"done": False})
    person = step(f'a person: click "{w["no"]}"', by="a person")
    assert evidence(task, [step('click "1"', f"[1] <button> {w['yes']}"), failed, checked, person],
                    repeat=True, page=page).reason == f'No action acted on "{w["no"]}", which the task names.'


def test_a_repeat_that_only_waited_opened_the_page_or_answered_nothing_is_not_done(w):
    opened = [step("go to http://127.0.0.1/book"), step("go to http://127.0.0.1/book")]
    assert evidence(w["book"], opened, repeat=True).reason == (
        "The actions only opened, scrolled or read the page, and the task asks for more.")
    assert evidence(w["go"], opened, repeat=True) is None  # opening it was the task
    # A question is answered by `answer`: a repeat gives none. Nor do waits, again and again.
    clicked = [step('click "1"', "[1] <button> A"), step('click "1"', "[1] <button> A")]
    assert evidence(w["how_many"], clicked, repeat=True).reason == "The task asks a question, and no answer was given."
    assert evidence(w["how_many"], [step("wait 24 s"), step("wait 24 s")], repeat=True).reason == (
        "No action was taken on the page, and no answer was given.")


def test_two_readings_of_the_same_page_compare_equal_whatever_came_before_them(w):
    page = buttons(w)
    assert page_part(page) == page_part(f'clicked [2] <button> {w["no"]}\n{page}') == page
    assert page_part(page.replace("[2]", "*[2]")) == page  # a new element's mark is not a change of the page
    assert page_part(f"{w['click']}\n\nThe browser is on this page:\n{page}") == page
    assert page_part("typed Ada") == ""
