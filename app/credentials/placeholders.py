"""The placeholders of stored credentials and arriving codes (`${cred:NAME.field}`, `${code:ID}`, `${link:ID}`),
and the site rule a credential's value is typed under."""
import json
import re
from urllib.parse import urlsplit

FIELDS = ("username", "password", "code")
CREDENTIAL = re.compile(r"\$\{cred:([A-Za-z0-9][A-Za-z0-9_-]{0,99})\.([a-z]+)\}")
ARRIVAL = re.compile(r"\$\{(code|link):([^\s{}]{1,320})\}")


def credential_names(text):
    """{name: {fields}} of the `${cred:NAME.field}` placeholders in `text`."""
    found = {}
    for name, field in CREDENTIAL.findall(text or ""):
        found.setdefault(name, set()).add(field)
    return found


def arrivals(text):
    """The (kind, identifier) of the `${code:...}` and `${link:...}` placeholders in `text`, identifiers
    normalised."""
    return sorted({(kind, normalise(identifier)) for kind, identifier in ARRIVAL.findall(text or "")})


def normalise(identifier):
    """An email address or phone number as it is matched: lowercased, a phone number's spaces, dots, dashes and
    brackets left out."""
    identifier = identifier.strip().lower()
    if "@" not in identifier:
        identifier = re.sub(r"[\s().-]", "", identifier)
    return identifier


SITE = re.compile(r"(\*\.)?[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*(:[0-9]{1,5})?")


def site_problem(site):
    """Why `site` is no site entry (a host, `*.` and a domain, either with `:port`), or None."""
    if not isinstance(site, str) or not SITE.fullmatch(site.strip().lower()):
        return (f"'{site}' is not a site: write a host name or address ('bank.example', '127.0.0.1'), '*.' and a "
                "domain for its subdomains ('*.bank.example'), either with ':port' to allow that port alone")
    if site.startswith("*.") and "." not in site[2:].split(":")[0]:
        return f"'{site}': a wildcard needs a domain of two labels at least ('*.bank.example')"
    return None


def on_sites(url, sites):
    """Whether the page at `url` (http or https) is on one of `sites`: the host itself, or (for `*.domain`) one
    of its subdomains; an entry with a port allows that port only."""
    parts = urlsplit(url or "")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return False
    host, port = parts.hostname.lower(), parts.port or (443 if parts.scheme == "https" else 80)
    for site in sites:
        name, _, wanted = site.lower().partition(":")
        if wanted and int(wanted) != port:
            continue
        if name.startswith("*."):
            if host.endswith(name[1:]) and host != name[2:]:
                return True
        elif host == name:
            return True
    return False


def origin(url):
    parts = urlsplit(url or "")
    return f"{parts.scheme}://{parts.netloc}" if parts.netloc else (url or "")


def placeholder_text(prompt, options):
    """Where a task's placeholders are: its prompt and its options (a replay's script, inputVariables, ...)."""
    return "\n".join([prompt or "", json.dumps(options or {}, default=str)])
