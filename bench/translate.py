"""`make eval --language <xx>`: MiniWoB++ task texts translated by a fixed table, bench/translations/<xx>.json.

A table lists [English template, translation] pairs: the English as core.getUtterance() returns it, its variable parts
in braces ({label}); the translation keeps each variable part as the page wrote it. The first template that matches
the whole utterance translates it, so a text or template comes before the templates that would also match it."""
import json
import re
from pathlib import Path

TABLES = Path(__file__).resolve().parent / "translations"


def table(language):
    """The table's (English template as a regex, translation template) pairs, in its order; None for English."""
    if language == "en":
        return None
    path = TABLES / f"{language}.json"
    if not path.is_file():
        raise SystemExit(f"no translation table {path}")
    # 'Click on the "{label}" button.' -> ^Click\ on\ the\ "(?P<label>.+?)"\ button\.$
    return [(re.compile("^" + re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>.+?)", re.escape(english)) + "$"), translated)
            for english, translated in json.loads(path.read_text())["templates"]]


def utterance(text, pairs):
    """The utterance in the table's language, its variable parts as the page wrote them (ValueError: no template)."""
    for pattern, translated in pairs:
        if match := pattern.match(text):
            return translated.format(**match.groupdict())
    raise ValueError(f"no translation for {text!r}")
