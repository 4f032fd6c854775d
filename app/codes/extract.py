"""The one-time code and the sign-in link in a message's text."""
import re

# A code is 4 to 10 digits (a space or dash may split it in two halves, as "481 516" is sent), or 6 to 10 capitals
# and digits with a digit in them; the one after a word that announces a code wins over any other number.
ANNOUNCED = re.compile(r"(?i)\b(?:code|passcode|otp|pin|password|verification|token)\b[^0-9\n]{0,40}?"
                       r"((?:[0-9]{2,5}[ -]?[0-9]{2,5})|(?=[A-Z0-9]*[0-9])[A-Z0-9]{6,10})\b")
DIGITS = re.compile(r"(?<![0-9A-Za-z.,:/])(?<![0-9]-)([0-9]{4,10})(?![0-9A-Za-z.,:/-]|-[0-9])")
LINK = re.compile(r"https?://[^\s<>\"')\]]+", re.IGNORECASE)
SIGN_IN_WORDS = re.compile(r"(?i)sign|log|login|magic|verify|confirm|auth|token|code|session")


def code_in(text):
    found = ANNOUNCED.search(text or "")
    if found:
        return re.sub(r"[ -]", "", found[1])
    found = DIGITS.search(text or "")
    return found[1] if found else None


def link_in(text):
    """The message's sign-in link: the first that looks like one (its path or query names signing in, a token, a
    code), else the first link."""
    links = [link.rstrip(".,;:!?") for link in LINK.findall(text or "")]
    for link in links:
        if SIGN_IN_WORDS.search(link.split("://", 1)[1].partition("/")[2]):
            return link
    return links[0] if links else None
