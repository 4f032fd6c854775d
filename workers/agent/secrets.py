"""secretVariables: planners see `${name}`; values are substituted at execution and redacted everywhere else."""
import contextlib
import logging
import re
from urllib.parse import quote, quote_plus

PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_.-]*)\}")


class Secrets:
    def __init__(self, values=None):
        self.values = {name: str(value) for name, value in (values or {}).items()}
        # Longest first, so a value that contains another is redacted whole.
        self._redactions = _ordered((v, "${%s}" % n) for n, v in self.values.items() if v)

    def hide(self, values, placeholder="[redacted]"):
        """Also redact these values (credentials the planner never names, e.g. MCP tokens)."""
        self._redactions = _ordered(self._redactions + [(v, placeholder) for v in values if v])

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
            for secret, placeholder in self._redactions:
                value = value.replace(secret, placeholder)
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


def _loggers():
    yield logging.getLogger()
    for logger in list(logging.Logger.manager.loggerDict.values()):
        if isinstance(logger, logging.Logger) and logger.handlers:
            yield logger


def _ordered(pairs):
    """Each value also in its URL-encoded forms (a secret typed into a GET form lands in the page's URL)."""
    out = {}
    for value, placeholder in pairs:
        for form in (value, quote(value, safe=""), quote_plus(value, safe="")):
            out.setdefault(form, placeholder)
    return sorted(out.items(), key=lambda pair: -len(pair[0]))


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
