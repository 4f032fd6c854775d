"""secretVariables: planners see `${name}`; values are substituted at execution and redacted everywhere else."""
import base64
import contextlib
import html
import logging
import re
from urllib.parse import quote, quote_plus, unquote, unquote_plus

from app import totp

MAX_REMEMBERED_SECONDS = 86400  # a question waits at most INPUT_TIMEOUT_SECONDS (a day by default)
CODE_SEPARATOR = r"[\s.,_·-]?"  # what a page may put between a code's digits
# `${NAME}` (secretVariables), `${cred:NAME.field}` (a stored credential), `${code:TO}` / `${link:TO}` (a code or
# sign-in link that arrives for TO while the task runs: app/codes).
PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_.-]*|cred:[A-Za-z0-9][A-Za-z0-9_-]*\.[a-z]+|"
                         r"(?:code|link):[^\s{}]{1,320})\}")


class ArrivalTimeout(Exception):
    """No code or link arrived for a `${code:...}` / `${link:...}` within CODE_WAIT_SECONDS."""


class AwaitingArrival(Exception):
    """A step names a code or link that has not arrived yet: the run pauses with `outcome` (input-required) and the
    step runs again when it arrives."""

    def __init__(self, outcome):
        super().__init__(outcome.text)
        self.outcome = outcome


class Secrets:
    def __init__(self, values=None, credentials=None, arrivals=None):
        """`credentials`: {"cred:NAME.field": (value, sites)} of the stored credentials the task names, typed only
        into pages on their sites (`sites_for`); `arrivals`: the ("code"|"link", identifier) the task waits for,
        filled by `wait(kind, identifier)` (set by the runner) when a step uses them."""
        credentials = credentials or {}
        self.sites = {name: sites for name, (_, sites) in credentials.items()}
        values = {name: str(value) for name, value in {
            **(values or {}), **{name: value for name, (value, _) in credentials.items()}}.items()}
        self.arrivals = [f"{kind}:{identifier}" for kind, identifier in (arrivals or [])]
        self.wait = None
        self.waited = []  # trace lines of the waits for codes and links ("waited 41 s for a code to ...")
        # An otpauth:// URI types a fresh one-time code at each use (app.totp); the URI and its seed stay hidden.
        self.generators = {name: generator for name, value in values.items()
                           if (generator := _generator(value)) is not None}
        self.values = {name: value for name, value in values.items() if name not in self.generators}
        self._pairs = [(v, "${%s}" % n) for n, v in values.items() if v]
        self._pairs += [(g.seed, "${%s}" % n) for n, g in self.generators.items() if g.seed]
        self._codes = {}  # every code generated during the task -> its placeholder: redacted like the values
        self._compile()

    def hide(self, values, placeholder="[redacted]"):
        """Also redact these values (credentials the planner never names, e.g. MCP tokens)."""
        self._pairs += [(v, placeholder) for v in values if v]
        self._compile()

    def _compile(self):
        # Every form a value can take on its way back to us (a host name comes back lowercased, a URL
        # percent-encoded or decoded, a page HTML-escaped), matched case-insensitively; longest
        # first, so a value that contains another is redacted whole.
        forms = {}
        for value, placeholder in self._pairs:
            for form in variants(value):
                forms.setdefault(form.casefold(), (form, placeholder))
        redactions = [(re.compile(re.escape(form), re.IGNORECASE), placeholder)
                      for form, placeholder in sorted(forms.values(), key=lambda pair: -len(pair[0]))]
        # A code is digits: matched as a whole number, so a longer number that holds it is not cut in two.
        codes = {}
        for code, placeholder in self._codes.items():
            codes.setdefault(placeholder, []).append(code)
        redactions += [(re.compile(rf"(?<![0-9])(?:{'|'.join(found)})(?![0-9])"), placeholder)
                       for placeholder, found in codes.items()]
        self._redactions = redactions  # one assignment: log filters on other threads see the old or the new list

    def names(self):
        return sorted([*self.values, *self.generators, *self.arrivals])

    def sites_for(self, value):
        """{placeholder: sites} of the stored credentials whose values `value` (an action's arguments, values
        substituted) holds: the page they are typed into must be on those sites."""
        text = value if isinstance(value, str) else repr(value)
        found = {}
        for name, sites in self.sites.items():
            if name in self.values:
                held = self.values[name] in text
            else:  # a credential's TOTP: the codes generated for it
                held = any(placeholder == "${%s}" % name and re.search(rf"(?<![0-9]){code}(?![0-9])", text)
                           for code, placeholder in self._codes.items())
            if held:
                found[name] = sites
        return found

    def holds(self, text):
        """Whether `text` (an action's argument, values substituted) holds a secret value."""
        return any(value in text for value, _ in self._pairs)

    def forms(self):
        """The texts recordings must not show four consecutive characters of (ASCII case ignored): each value of
        four characters or more as is, reversed, and in base64 (standard and URL-safe: the value's own, and the
        middle of a longer base64 text holding it at either other byte alignment)."""
        forms = set()
        for value, _ in self._pairs:
            if len(value) < 4:
                continue
            forms.update((value, value[::-1]))
            for shift in range(3):
                for encode in (base64.b64encode, base64.urlsafe_b64encode):
                    text = encode(bytes(shift) + value.encode()).decode()
                    forms.add(text[4:-4] if shift else text)  # the groups that hold other bytes are left out
        return sorted(form for form in forms if len(form) >= 4)

    def mask_pieces(self, value, keep=()):
        """Every four consecutive characters of `forms` starred, in strings nested anywhere in `value` but under the
        keys `keep` (structure, such as a recorded element's tag name): what a recording keeps of a page that shows a
        secret's prefix as it is typed, its reversal or its base64; and runs of the one-time codes typed."""
        pieces = {re.escape(form[i:i + 4].lower()) for form in self.forms() for i in range(len(form) - 3)}
        # A one-time code typed in this run: four of its digits in a row, as typed or reversed, spaced out or not (a
        # page that echoes each keystroke shows its prefixes; one that lays it out shows "1 2 3 4 5 6").
        pieces.update(CODE_SEPARATOR.join(digits[i:i + 4]) for code in self._codes
                      for digits in (code, code[::-1]) for i in range(len(digits) - 3))
        if not pieces:
            return value
        pattern = re.compile("|".join(sorted(pieces)), re.IGNORECASE)
        return _starred(value, pattern, frozenset(keep))

    def substitute(self, value):
        """Put the real values into an action's arguments (strings, lists, dicts), just before execution."""
        if isinstance(value, str):
            return PLACEHOLDER.sub(self._value, value)
        if isinstance(value, list):
            return [self.substitute(v) for v in value]
        if isinstance(value, dict):
            return {k: self.substitute(v) for k, v in value.items()}
        return value

    def remember_codes(self, since, until):
        """Redact every code of the periods from `since` to `until` (Unix seconds) too: a run resumed after a pause
        may find a code typed before it still on the page."""
        for name, generator in self.generators.items():
            first = max(int(since), int(until) - MAX_REMEMBERED_SECONDS) // generator.period
            for counter in range(first, int(until) // generator.period + 1):
                self._codes.setdefault(generator.code(counter * generator.period), "${%s}" % name)
        self._compile()

    def _value(self, match):
        name = match[1]
        if name.startswith(("code:", "link:")):
            return self._arrived(name)
        generator = self.generators.get(name)
        if generator is None:
            return self.values.get(name, match[0])
        code = generator.fresh_code()
        if code not in self._codes:  # hidden before it is typed: the page view that shows it is redacted
            self._codes[code] = match[0]
            self._compile()
        return code

    def _arrived(self, name):
        """The newest code or link for `name`'s identifier (waited for: `wait` raises ArrivalTimeout), hidden
        before it is typed or opened, as a TOTP code is."""
        kind, identifier = name.split(":", 1)
        if self.wait is None:
            raise ArrivalTimeout(f"${{{name}}}: codes and links are not received here.")
        value = self.wait(kind, identifier)
        if kind == "code" and value.isdigit():
            self._codes.setdefault(value, "${%s}" % name)
        else:
            self._pairs.append((value, "${%s}" % name))
        self._compile()
        return value

    def redact(self, value):
        """Replace every secret value by its placeholder, in strings nested anywhere in `value`."""
        if isinstance(value, str):
            for pattern, placeholder in self._redactions:
                value = pattern.sub(lambda _, placeholder=placeholder: placeholder, value)
            return value
        if isinstance(value, list):
            return [self.redact(v) for v in value]
        if isinstance(value, dict):
            return {k: self.redact(v) for k, v in value.items()}
        return value

    @contextlib.contextmanager
    def redacting_logs(self):
        """While the task runs, every log record (from any library) is redacted before a handler writes it."""
        if not self._redactions and not self.arrivals:  # a code that arrives later is redacted from then on
            yield
            return
        redactor = _RedactingFilter(self)
        handlers = {h for logger in _loggers() for h in logger.handlers}
        for handler in handlers:
            handler.addFilter(redactor)
        try:
            yield
        finally:
            for handler in handlers:
                handler.removeFilter(redactor)


def _generator(value):
    """A one-time code generator for an otpauth:// URI; None for any other value. A malformed URI (refused at
    submit, but stored by an older version) stays a plain value: it is typed and redacted as written."""
    if not totp.is_totp_uri(value):
        return None
    try:
        return totp.parse(value)
    except totp.MalformedUri:
        return None


def variants(value):
    """`value` as it may appear in text we store: as is, percent-encoded or decoded, HTML-escaped or
    unescaped (case changes are matched by the caller, which ignores case)."""
    plain = {value, unquote(value), unquote_plus(value), html.unescape(value)}
    forms = set()
    for form in plain:
        for encoded in (form, quote(form, safe=""), quote(form), quote_plus(form), quote_plus(form, safe="/"),
                        html.escape(form), html.escape(form, quote=False)):
            forms.update((encoded, quote(html.escape(encoded), safe=""),
                          html.escape(quote(encoded, safe=""))))
    forms.update([form.casefold() for form in forms])
    return {form for form in forms if form}


def _starred(value, pattern, keep):
    if isinstance(value, str):
        chars, found = None, pattern.search(value)
        while found:  # overlapping pieces too: a run of the secret is starred whole
            chars = chars or list(value)
            chars[found.start():found.end()] = "*" * (found.end() - found.start())
            found = pattern.search(value, found.start() + 1)
        return "".join(chars) if chars else value
    if isinstance(value, list):
        return [_starred(v, pattern, keep) for v in value]
    if isinstance(value, dict):
        return {k: v if k in keep else _starred(v, pattern, keep) for k, v in value.items()}
    return value


def _loggers():
    yield logging.getLogger()
    for logger in list(logging.Logger.manager.loggerDict.values()):
        if isinstance(logger, logging.Logger) and logger.handlers:
            yield logger


class _RedactingFilter(logging.Filter):
    def __init__(self, secrets):
        super().__init__()
        self.secrets = secrets

    def filter(self, record):
        record.msg, record.args = self.secrets.redact(record.getMessage()), ()
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.secrets.redact(record.exc_text)
        return True


def unknown_placeholder(url):
    """Why a URL still holding a ${NAME} after substitution is not opened: NAME is no secret of the task, and a
    small model writes such URLs (go to ${USER}); opening one would send a made-up host name to DNS."""
    found = PLACEHOLDER.search(url or "")
    if found is None:
        return None
    return (f"navigation refused: ${{{found[1]}}} is not a secret placeholder of this task; "
            "go to a real URL (the task's own placeholders are filled in when the step runs).")
