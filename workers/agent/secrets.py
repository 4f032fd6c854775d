"""secretVariables: planners see `${name}`; values are substituted at execution and redacted everywhere else."""
import contextlib
import html
import logging
import re
from urllib.parse import quote, quote_plus, unquote, unquote_plus

PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_.-]*)\}")


class Secrets:
    def __init__(self, values=None):
        self.values = {name: str(value) for name, value in (values or {}).items()}
        self._pairs = [(v, "${%s}" % n) for n, v in self.values.items() if v]
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
        self._redactions = [(re.compile(re.escape(form), re.IGNORECASE), placeholder)
                            for form, placeholder in sorted(forms.values(), key=lambda pair: -len(pair[0]))]

    def names(self):
        return sorted(self.values)

    def substitute(self, value):
        """Put the real values into an action's arguments (strings, lists, dicts), just before execution."""
        if isinstance(value, str):
            return PLACEHOLDER.sub(lambda m: self.values.get(m[1], m[0]), value)
        if isinstance(value, list):
            return [self.substitute(v) for v in value]
        if isinstance(value, dict):
            return {k: self.substitute(v) for k, v in value.items()}
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
        if not self._redactions:
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
