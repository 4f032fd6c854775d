"""One-time codes: a secretVariables value that is an `otpauth://totp/...` URI generates RFC 6238 codes."""
import base64
import binascii
import hashlib
import hmac
import struct
import time
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit

ALGORITHMS = {"SHA1": hashlib.sha1, "SHA256": hashlib.sha256, "SHA512": hashlib.sha512}
# A code with less than this left of its period is not typed: the next one is, once its period has begun, so
# the site gets a code with (nearly) a whole period ahead for the steps that submit it.
FRESH_SECONDS = 5
# 80 bits, the shortest seed sites hand out (RFC 4226 asks for 128): a shorter one would be guessable, and as a
# secret redacted wherever it appears, a seed of a few letters would cut up ordinary words.
MIN_KEY_BYTES = 10


class MalformedUri(ValueError):
    pass


@dataclass(frozen=True)
class Totp:
    key: bytes = field(repr=False)
    digits: int = 6
    period: int = 30
    algorithm: str = "SHA1"
    seed: str = field(default="", repr=False, compare=False)  # the base32 text as the URI gave it: redacted too

    def code(self, at):
        """The code of the period that holds `at` (Unix seconds): RFC 4226's HOTP over RFC 6238's counter."""
        counter = int(at) // self.period
        digest = hmac.new(self.key, struct.pack(">Q", counter), ALGORITHMS[self.algorithm]).digest()
        offset = digest[-1] & 0x0F
        number = struct.unpack(">I", digest[offset:offset + 4])[0] & 0x7FFFFFFF
        return str(number % 10 ** self.digits).zfill(self.digits)

    def fresh_code(self, clock=time.time, sleep=time.sleep):
        """The code valid now; when it expires within FRESH_SECONDS, the next one, after waiting for its period."""
        now = clock()
        left = self.period - now % self.period
        if left < FRESH_SECONDS:
            sleep(left)
            now = max(clock(), now + left)
        return self.code(now)


def is_totp_uri(value):
    return isinstance(value, str) and value.lower().startswith("otpauth:")


def parse(uri):
    """A Totp from an otpauth:// URI (issuer and label are ignored); MalformedUri says what is wrong."""
    parts = urlsplit(uri.strip())
    if parts.scheme.lower() != "otpauth" or parts.netloc.lower() != "totp":
        raise MalformedUri("an otpauth URI must be otpauth://totp/...: only time-based codes (TOTP) are supported")
    try:
        query = {name.lower(): values[-1] for name, values in parse_qs(parts.query, strict_parsing=True).items()}
    except ValueError:
        query = {}
    secret = query.get("secret", "")
    if not secret:
        raise MalformedUri("the otpauth URI has no secret parameter")
    cleaned = secret.replace(" ", "").upper()
    try:
        key = base64.b32decode(cleaned + "=" * (-len(cleaned) % 8))
    except (binascii.Error, ValueError):
        raise MalformedUri("the otpauth URI's secret is not base32 (letters A-Z and digits 2-7)") from None
    if len(key) < MIN_KEY_BYTES:
        raise MalformedUri(f"the otpauth URI's secret is too short: at least {MIN_KEY_BYTES * 8} bits "
                           f"({MIN_KEY_BYTES * 8 // 5} base32 characters)")
    digits = _number(query, "digits", 6)
    if not 6 <= digits <= 8:
        raise MalformedUri(f"the otpauth URI's digits must be 6, 7 or 8 (got {digits})")
    period = _number(query, "period", 30)
    if not 1 <= period <= 3600:
        raise MalformedUri(f"the otpauth URI's period must be 1 to 3600 seconds (got {period})")
    algorithm = query.get("algorithm", "SHA1").upper()
    if algorithm not in ALGORITHMS:
        raise MalformedUri(f"the otpauth URI's algorithm must be SHA1, SHA256 or SHA512 (got {algorithm[:20]!r})")
    return Totp(key, digits, period, algorithm, seed=secret)


def _number(query, name, default):
    text = query.get(name)
    if text is None:
        return default
    if not text.isdigit() or len(text) > 6:
        raise MalformedUri(f"the otpauth URI's {name} is not a whole number")
    return int(text)


def problems(secret_variables):
    """{name: why} for each value that looks like an otpauth URI and is not a usable TOTP generator."""
    found = {}
    for name, value in (secret_variables or {}).items():
        if is_totp_uri(value):
            try:
                parse(value)
            except MalformedUri as exc:
                found[name] = str(exc)
    return found
