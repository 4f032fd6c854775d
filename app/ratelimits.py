"""Rate limits per API-key plan (flask-limiter), counted per API key, not per address."""
import logging

from flask import current_app, g
from flask_limiter import Limiter
from flask_limiter.util import get_remote_address
from limits import parse_many

from .metrics import events as metrics

log = logging.getLogger(__name__)


def _caller():
    """The key's hash, not its row id: ids restart when a test database is truncated."""
    key = g.get("api_key")
    return f"key:{key.key_hash}" if key is not None else f"ip:{get_remote_address()}"


limiter = Limiter(key_func=_caller)
BUCKETS = ("requests", "polls")


def init_app(app):
    """Check the plans now rather than on some request, then bind the limiter."""
    plans = app.config["RATE_LIMIT_PLANS"]
    for name, plan in plans.items():
        for bucket in BUCKETS:
            try:
                parse_many(plan[bucket])
            except (KeyError, TypeError, ValueError):
                raise ValueError(f"RATE_LIMIT_PLANS: plan {name!r} needs a {bucket!r} limit such as "
                                 f"'60/minute'; it has {plan!r}.") from None
        if not isinstance(plan.get("cdp", False), bool):
            raise ValueError(f"RATE_LIMIT_PLANS: plan {name!r} has \"cdp\": {plan['cdp']!r}; use true or false.")
        cap = plan.get("schedules", 0)
        if not isinstance(cap, int) or isinstance(cap, bool) or cap < 0:
            raise ValueError(f"RATE_LIMIT_PLANS: plan {name!r} has \"schedules\": {cap!r}; use a whole number >= 0.")
    if app.config["RATE_LIMIT_DEFAULT_PLAN"] not in plans:
        raise ValueError(f"RATE_LIMIT_DEFAULT_PLAN {app.config['RATE_LIMIT_DEFAULT_PLAN']!r} is not "
                         f"one of the plans: {', '.join(plans)}.")
    # Flask runs after_request hooks last-registered first: registered before the limiter's own,
    # this one sees the headers the limiter added.
    app.after_request(_retry_after_only_when_refused)
    limiter.init_app(app)


def _retry_after_only_when_refused(response):
    """flask-limiter sets Retry-After on every response it counts, over any the response had; its value means
    something only on 429. Any other response keeps the one its handler set (a 503's), or none."""
    if response.status_code == 429:
        return response
    if own := g.get("retry_after"):
        response.headers["Retry-After"] = own
    else:
        response.headers.pop("Retry-After", None)
    return response


def _plan():
    plans = current_app.config["RATE_LIMIT_PLANS"]
    name = g.api_key.plan
    if name not in plans:
        log.warning("API key %s has unknown plan %r; using the default plan", g.api_key.id, name)
        name = current_app.config["RATE_LIMIT_DEFAULT_PLAN"]
    return name, plans[name]


def plan_allows(feature):
    """True if the caller's plan switches `feature` on ("cdp"); a plan that does not name it has it off."""
    return _plan()[1].get(feature) is True


def plan_value(name, default=None):
    """A named value of the caller's plan ("schedules": how many it may have), or `default`."""
    return _plan()[1].get(name, default)


def plan_limit(bucket):
    """A shared limit whose rate is read from the caller's plan on every request.

    Views are decorated (rather than the blueprint) so the check runs after `require_api_key`
    has set `g.api_key`, and before the body is parsed.
    """

    def rate():
        return _plan()[1][bucket]

    def message():
        name, plan = _plan()
        return (f"Rate limit of the '{name}' plan exceeded: {plan[bucket]} for {bucket}. "
                "Retry after the number of seconds in the Retry-After header.")

    def refused(_limit):
        metrics.rate_limit_refusals.labels(_plan()[0], bucket).inc()
        return None  # the limiter's own 429 ({error, message}, Retry-After)

    return limiter.shared_limit(rate, scope=bucket, error_message=message, on_breach=refused)


requests_limit = plan_limit("requests")
polls_limit = plan_limit("polls")
