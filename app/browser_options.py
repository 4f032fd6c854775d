"""The browser options a caller gives a task (submit) and a kept session (create) alike: its own proxy, a named
profile, and the identity its browser shows sites (app/sandbox/settings.py)."""
from zoneinfo import available_timezones

from flask import current_app
from marshmallow import ValidationError, fields, post_load, validate, validates, validates_schema

from .egress import upstream
from .egress.policy import Policy, Unresolvable, UnsafeUrl
from .sandbox import settings as browser_settings
from .schema_base import FullMatch, LenientSchema, StrictBoolean

ZONES = frozenset(available_timezones())


class ProxySchema(LenientSchema):
    """The caller's own proxy (app/egress/upstream.py): the browser's traffic leaves through it, behind the egress
    proxy, whose fences apply to every destination first."""
    server = fields.String(required=True, validate=validate.Length(min=1, max=300), metadata={
        "description": "http://host:port, https://host:port (TLS to the proxy) or socks5://host:port; the port "
                       "given, no path, no credentials in it. Its address passes the outbound policy as any: a "
                       "private address is refused (400) unless the instance allows it"})
    username = fields.String(allow_none=True, validate=validate.Length(min=1, max=upstream.MAX_CREDENTIAL_CHARS),
                             metadata={"description": "Basic (HTTP) or RFC 1929 (SOCKS5) user name; no ':'"})
    password = fields.String(allow_none=True, validate=validate.Length(max=upstream.MAX_CREDENTIAL_CHARS),
                             metadata={"description": "Kept encrypted; never in a trace, log, recording or poll"})

    @validates("server")
    def _is_proxy_address(self, value, **_):
        try:
            _, host, port = upstream.parse_server(value)
        except upstream.InvalidProxy as exc:
            raise ValidationError(str(exc).removeprefix("proxy.server ")) from None
        if current_app.config["ALLOW_PRIVATE_URLS"]:
            return
        try:  # decided now where it can be; the egress proxy checks it again at each connection
            Policy.from_config(current_app.config).check_host(host, port)
        except Unresolvable:  # maybe not yet, or not from the web machine: the task says why if it stays so
            return
        except UnsafeUrl as exc:
            raise ValidationError(f"{exc}.") from None

    @validates_schema
    def _sendable_credentials(self, data, **_):
        for name in ("username", "password"):
            if any(ord(c) < 0x20 or ord(c) == 0x7f for c in data.get(name) or ""):
                raise ValidationError(f"{name} must not contain control characters.", name)
        if ":" in (data.get("username") or ""):
            raise ValidationError("username must not contain ':' (Basic credentials are user:password).",
                                  "username")
        if data.get("password") and not data.get("username"):
            raise ValidationError("a password needs a username.", "username")


class ProfileOptionSchema(LenientSchema):
    """`profile` on submit and on creating a kept session (app/profiles)."""

    name = fields.String(required=True, validate=FullMatch(
        r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$", error="a profile name has 1 to 100 characters: letters, digits, '.', "
                                                   "'_' and '-', starting with a letter or a digit."))
    persist = StrictBoolean(load_default=False, metadata={
        "description": "Save the browser's state into the profile at the end (one writer at a time: 409 naming "
                       "the task or session writing it now)."})


class SizeSchema(LenientSchema):
    width = fields.Integer(strict=True, required=True, validate=validate.Range(min=240, max=7680))
    height = fields.Integer(strict=True, required=True, validate=validate.Range(min=240, max=4320))


class GeolocationSchema(LenientSchema):
    latitude = fields.Float(required=True, allow_nan=False, validate=validate.Range(min=-90, max=90))
    longitude = fields.Float(required=True, allow_nan=False, validate=validate.Range(min=-180, max=180))
    accuracy = fields.Float(allow_none=True, allow_nan=False, validate=validate.Range(min=0, max=100000), metadata={
        "description": "Metres (default 20)"})


class BrowserSettingsSchema(LenientSchema):
    """`browserSettings` on submit (cloud_browser) and on creating a kept session: the identity its browser shows
    sites, every value agreeing (app/sandbox/settings.py; docs/browser-identity.md)."""

    device = fields.String(allow_none=True, validate=validate.OneOf(
        sorted(browser_settings.DEVICES), error="unknown device '{input}': one of {choices}."), metadata={
        "description": "A device preset: desktops (Linux, Chromium's own User-Agent) and Android phones (Chrome for "
                       "Android's User-Agent, platform, client hints, touch, screen and pixel ratio). Default "
                       f"{browser_settings.DEFAULT_DEVICE} with the deployment's window size"})
    viewport = fields.Nested(SizeSchema, allow_none=True, metadata={
        "description": "The page's size (innerWidth x innerHeight); it must fit the screen"})
    screen = fields.Nested(SizeSchema, allow_none=True, metadata={
        "description": "A desktop's screen (a phone's is its preset's)"})
    locale = fields.String(allow_none=True, validate=validate.Length(max=20), metadata={
        "description": "A BCP 47 language tag (fr-FR, pt-BR, zh-Hant-TW): navigator.languages, Accept-Language, "
                       "Intl"})
    timeZone = fields.String(allow_none=True, metadata={
        "description": "IANA time zone. On a task it is the task's `timeZone` (give it once, or twice the same)"})
    geolocation = fields.Nested(GeolocationSchema, allow_none=True, metadata={
        "description": "navigator.geolocation's position, and its permission granted to every page; without it, "
                       "no page is granted geolocation"})
    colorScheme = fields.String(allow_none=True, validate=validate.OneOf(browser_settings.COLOR_SCHEMES), metadata={
        "description": "prefers-color-scheme"})

    @validates("locale")
    def _is_language_tag(self, value, **_):
        if value is not None and browser_settings.canonical_locale(value) is None:
            raise ValidationError(f"'{value}' is not a BCP 47 language tag of a language, an optional script and an "
                                  "optional region (e.g. fr-FR, pt-BR, zh-Hant-TW).")

    @validates("timeZone")
    def _is_iana_zone(self, value, **_):
        if value is not None and value not in ZONES:
            raise ValidationError(f"'{value}' is not an IANA time zone (e.g. Europe/Paris).")

    @validates_schema
    def _consistent(self, data, **_):
        found = browser_settings.problems(data)
        if found:
            raise ValidationError(found)

    @post_load
    def _canonical(self, data, **_):
        """Only what was given (explicit nulls dropped), the locale in its canonical case."""
        data = {name: value for name, value in data.items() if value is not None}
        if data.get("locale"):
            data["locale"] = browser_settings.canonical_locale(data["locale"])
        return data
