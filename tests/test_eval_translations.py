"""`make eval --language de`: the easy set's task texts, as MiniWoB++ generates them, in German by the fixed table."""
import pytest

from bench import translate

# One utterance of each template of the easy set (core.getUtterance()'s text), and its translation.
EASY = {
    "Click the button.": "Klicke auf die Schaltfläche.",
    "Click button TWO.": "Klicke auf die Schaltfläche TWO.",
    'Click on the "Ok" button.': "Klicke auf die Schaltfläche „Ok“.",
    'Click on the link "elit".': "Klicke auf den Link „elit“.",
    "Focus into the textbox.": "Setze den Fokus in das Textfeld.",
    'Enter "Kasie" into the text field and press Submit.': "Gib „Kasie“ in das Textfeld ein und drücke auf Submit.",
    'Close the dialog box by clicking the "x".': "Schließe das Dialogfenster, indem du auf das „x“ klickst.",
    "Select nothing and click Submit.": "Wähle nichts aus und klicke auf Submit.",
    "Select ZrLIee, 3mJ5 and click Submit.": "Wähle ZrLIee, 3mJ5 aus und klicke auf Submit.",
    "Select Gabon from the list and click Submit.": "Wähle Gabon aus der Liste aus und klicke auf Submit.",
    'Enter the username "kanesha" and the password "Oby" into the text fields and press login.':
        "Gib den Benutzernamen „kanesha“ und das Passwort „Oby“ in die Textfelder ein und drücke auf login.",
}


def test_every_easy_task_text_has_its_german_translation_with_the_pages_words_kept():
    table = translate.table("de")
    assert {english: translate.utterance(english, table) for english in EASY} == EASY
    assert translate.table("en") is None


def test_a_text_the_table_has_no_template_for_is_refused():
    with pytest.raises(ValueError, match="no translation for 'Drag the box.'"):
        translate.utterance("Drag the box.", translate.table("de"))
    with pytest.raises(SystemExit, match="no translation table"):
        translate.table("xx")
