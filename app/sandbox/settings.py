"""The identity a caller chooses for a browser (`browserSettings` of a cloud_browser task or a kept session): device
presets, the checks that keep a combination consistent, and what the browser is told so that every value a page can
read agrees (docs/browser-identity.md, "Choosing the identity").

Only subprocess-free code here: the web side validates with it, the workers and the session launcher apply it."""
import re
from dataclasses import dataclass, field

from . import box


@dataclass(frozen=True)
class Device:
    """A device a browser can pass for. `viewport`: the page's inner size (a phone's is its screen less the status
    and address bars); `window`: a desktop's window (outer size) on its screen."""
    screen: tuple
    viewport: tuple
    pixel_ratio: float = 1.0
    mobile: bool = False
    touch_points: int = 0
    model: str = ""  # Sec-CH-UA-Model, a phone's
    android: str = ""  # a phone's Android version (the client hints' platformVersion)


# Headless Chromium's window has no browser UI above its page: the page is as large as the window less this much
# height (what a desktop Chromium's tab strip and toolbar take), so a desktop's inner size is below its outer size.
DESKTOP_FRAME = (0, 143)

DEVICES = {
    # Desktops: Linux x86-64, like the default identity (which is desktop-1080p with its 1280x900 window).
    "desktop-1080p": Device(screen=(1920, 1080), viewport=(1280, 900 - DESKTOP_FRAME[1])),
    "desktop-1440p": Device(screen=(2560, 1440), viewport=(1600, 1000 - DESKTOP_FRAME[1])),
    "laptop-1366": Device(screen=(1366, 768), viewport=(1280, 720 - DESKTOP_FRAME[1])),
    # Android phones: Chrome for Android's User-Agent, platform, client hints, touch, screen and pixel ratio.
    "pixel-7": Device(screen=(412, 915), viewport=(412, 839), pixel_ratio=2.625, mobile=True, touch_points=5,
                      model="Pixel 7", android="14.0.0"),
    "galaxy-s23": Device(screen=(360, 780), viewport=(360, 708), pixel_ratio=3.0, mobile=True, touch_points=5,
                         model="SM-S911B", android="14.0.0"),
}
DEFAULT_DEVICE = "desktop-1080p"
COLOR_SCHEMES = ("light", "dark")
# A BCP 47 tag as browsers take them: a language, an optional script, an optional region (fr, fr-CA, zh-Hant-TW,
# es-419). Extensions and private-use subtags are refused: Chromium's language list and Accept-Language have none.
LOCALE = re.compile(r"([a-z]{2,3})(?:-([a-z]{4}))?(?:-([a-z]{2}|[0-9]{3}))?", re.IGNORECASE)
# The settings that need the browser started with them (its flags): the others are set per tab over CDP, which a
# pooled browser takes as well as a fresh one.
LAUNCH_SETTINGS = ("device", "viewport", "screen", "locale")


def canonical_locale(tag):
    """`tag` in the case BCP 47 recommends (fr-ca -> fr-CA, zh-hant-tw -> zh-Hant-TW); None if it is none."""
    match = LOCALE.fullmatch(tag or "")
    if not match:
        return None
    language, script, region = match.groups()
    return "-".join(part for part in (language.lower(), script and script.title(), region and region.upper()) if part)


def accept_languages(locale):
    """The language list of a browser whose person chose `locale`, as Chromium keeps it (intl.accept_languages):
    the tag, then its language alone (fr-FR -> "fr-FR,fr"), which navigator.languages and Accept-Language both
    list (Chromium would add the language to the header alone, so the two would disagree)."""
    base = locale.split("-")[0]
    return locale if base == locale else f"{locale},{base}"


def problems(settings):
    """Why `settings` (browserSettings, as loaded) cannot make one consistent browser: {field: message}; {} if it
    can. The shape of each field is the schema's to check; this checks how they fit together."""
    found = {}
    device = DEVICES[settings.get("device") or DEFAULT_DEVICE]  # a known one: the schema's OneOf
    screen, viewport = settings.get("screen"), settings.get("viewport")
    if device.mobile and screen:
        found["screen"] = (f"'{settings['device']}' has its own screen ({device.screen[0]}x{device.screen[1]}): a "
                           "phone's screen is not a setting; give a desktop device (or none) to choose the screen.")
        screen = None
    width, height = (screen["width"], screen["height"]) if screen else device.screen
    if viewport:
        room = (width, height) if device.mobile else (width - DESKTOP_FRAME[0], height - box.TASKBAR - DESKTOP_FRAME[1])
        if viewport["width"] > room[0] or viewport["height"] > room[1]:
            what = f"the screen of '{settings['device']}'" if settings.get("device") else "the screen"
            found["viewport"] = (f"a {viewport['width']}x{viewport['height']} viewport does not fit {what} "
                                 f"({width}x{height}): at most {room[0]}x{room[1]}"
                                 + ("" if device.mobile else f" (a desktop's taskbar takes {box.TASKBAR} pixels and "
                                    f"the browser's own bars {DESKTOP_FRAME[1]})") + ".")
    elif screen and not device.mobile:
        window = _window(device.viewport)
        if window[0] > width or window[1] > height - box.TASKBAR:
            found["screen"] = (f"a {width}x{height} screen is smaller than the {window[0]}x{window[1]} window of "
                               f"'{settings.get('device') or DEFAULT_DEVICE}': give a viewport that fits it too.")
    return found


def needs_fresh_browser(settings):
    """Whether a task with these settings must get a browser started for it (its flags): a pooled browser is started
    for the default identity and takes only what CDP sets per tab (colour scheme, geolocation, time zone)."""
    return any((settings or {}).get(name) for name in LAUNCH_SETTINGS)


def _window(viewport):
    return viewport[0] + DESKTOP_FRAME[0], viewport[1] + DESKTOP_FRAME[1]


def android_user_agent(major):
    """Chrome for Android's User-Agent, in its reduced form (every Chrome since 110 sends "Android 10; K" whatever
    the phone, and zeros for the minor version numbers)."""
    return (f"Mozilla/5.0 (Linux; Android 10; K) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/{major}.0.0.0 "
            "Mobile Safari/537.36")


@dataclass
class Identity:
    """What a browser is told for one `browserSettings`: its launch flags' values, and the CDP commands each tab
    (and, once, the browser) gets. Every value a page reads comes from here, so they agree."""
    device: Device
    window_size: tuple
    screen: tuple
    taskbar: int
    locale: str
    accept_languages: str
    user_agent: str | None  # the --user-agent flag (and the override's), None when the version is not known
    user_agent_override: dict | None  # Emulation.setUserAgentOverride's parameters
    tab_commands: list = field(default_factory=list)  # (CDP command, params), in every tab
    browser_commands: list = field(default_factory=list)  # (CDP command, params), once per browser
    time_zone: str | None = None
    source: tuple = ()  # identity()'s arguments but the version: identity_of_version makes it again


def identity_of_version(chosen, version):
    """`chosen` again for a Chromium of `version` (a Grid's, known once its session has started)."""
    settings, window_size, locale, time_zone = chosen.source
    return identity(settings, version, window_size, locale, time_zone)


def identity(settings, version=None, window_size=(1280, 900), locale="en-US", time_zone=None):
    """The Identity of `settings` (browserSettings, valid) for a Chromium of `version` ("156.0.8078.129"; None when
    not known: no User-Agent is set). `window_size`, `locale`: the deployment's defaults (BROWSER_WINDOW_SIZE,
    BROWSER_LOCALE), used when the settings name no device, viewport or locale."""
    settings = settings or {}
    device = DEVICES[settings.get("device") or DEFAULT_DEVICE]
    chosen = settings.get("viewport")
    if device.mobile:
        viewport = (chosen["width"], chosen["height"]) if chosen else device.viewport
        window, screen, taskbar = device.screen, device.screen, 0
    else:
        window = _window((chosen["width"], chosen["height"])) if chosen else (
            _window(device.viewport) if settings.get("device") else tuple(window_size))
        viewport = (window[0] - DESKTOP_FRAME[0], window[1] - DESKTOP_FRAME[1])
        chosen_screen = settings.get("screen")
        screen = (chosen_screen["width"], chosen_screen["height"]) if chosen_screen else device.screen
        taskbar = box.TASKBAR
    lang = canonical_locale(settings.get("locale")) or locale
    accept = accept_languages(lang)
    user_agent = override = None
    if version:
        major = version.split(".")[0]
        override = box.identity_override_of(version)
        if device.mobile:
            user_agent = android_user_agent(major)
            override = {"userAgent": user_agent, "platform": "Linux armv81",
                        "userAgentMetadata": {**override["userAgentMetadata"], "platform": "Android",
                                              "platformVersion": device.android, "architecture": "", "bitness": "",
                                              "model": device.model, "mobile": True}}
        else:
            user_agent = override["userAgent"]
    commands = []
    if settings.get("locale"):  # Intl's default locale: --lang gives only navigator.languages and Accept-Language
        commands.append(("Emulation.setLocaleOverride", {"locale": lang}))
    if device.mobile or device.pixel_ratio != 1:
        commands.append(("Emulation.setDeviceMetricsOverride", {
            "width": viewport[0], "height": viewport[1], "deviceScaleFactor": device.pixel_ratio,
            "mobile": device.mobile, "screenWidth": screen[0], "screenHeight": screen[1],
            "screenOrientation": {"type": "portraitPrimary", "angle": 0}}))
    if device.touch_points:
        commands.append(("Emulation.setTouchEmulationEnabled", {"enabled": True,
                                                                "maxTouchPoints": device.touch_points}))
    if settings.get("colorScheme"):
        commands.append(("Emulation.setEmulatedMedia", {"features": [
            {"name": "prefers-color-scheme", "value": settings["colorScheme"]}]}))
    browser_commands = []
    place = settings.get("geolocation")
    if place:
        commands.append(("Emulation.setGeolocationOverride", {
            "latitude": place["latitude"], "longitude": place["longitude"], "accuracy": place.get("accuracy") or 20}))
        browser_commands.append(("Browser.grantPermissions", {"permissions": ["geolocation"]}))
    return Identity(device=device, window_size=window, screen=screen, taskbar=taskbar, locale=lang,
                    accept_languages=accept, user_agent=user_agent, user_agent_override=override,
                    tab_commands=commands, browser_commands=browser_commands,
                    time_zone=settings.get("timeZone") or time_zone, source=(settings, window_size, locale, time_zone))
