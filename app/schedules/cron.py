"""Fire times of a cron expression in a time zone (cronsim), as aware UTC datetimes.

Daylight-saving changes follow cron's own rule (Debian cron, and cronsim with it): a time that does not exist on the
spring-forward day (02:30 in Europe/Oslo) fires once, at the first instant after the gap (03:00); a time that comes
twice on the autumn day fires once, at its first occurrence; a wildcard hour (`*/30 * * * *`) fires at each real
half-hour, both passes of the repeated hour included. So a "daily at 02:30" job runs exactly once every day, and an
"every 30 minutes" one never waits an hour.
"""
from datetime import datetime, timezone
from itertools import islice
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from cronsim import CronSim, CronSimError


class CronProblem(ValueError):
    pass


def zone(name):
    if not isinstance(name, str) or name not in _ZONES:
        raise CronProblem(f"'{name}' is not an IANA time zone name (such as Europe/Oslo or UTC).")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise CronProblem(f"'{name}' is not an IANA time zone name (such as Europe/Oslo or UTC).") from exc


_ZONES = available_timezones() | {"UTC"}


def fires_after(expr, zone_name, after, count=None):
    """The fire times strictly after `after` (aware), oldest first, as UTC; `count` of them, or an iterator."""
    tz = zone(zone_name)
    try:
        it = CronSim(expr, after.astimezone(tz))
    except CronSimError as exc:
        raise CronProblem(f"'{expr}' is not a cron expression ({exc}); five fields: minute hour day month weekday, "
                          "e.g. '0 7 * * 1-5'.") from exc
    utc = (moment.astimezone(timezone.utc) for moment in it)
    return list(islice(utc, count)) if count is not None else utc


def check(expr, zone_name, now, min_interval):
    """Raise CronProblem unless the expression fires at all and never twice within `min_interval` seconds (checked
    over the next 200 fires, which covers every expression whose shortest gap recurs within a few days)."""
    fires = fires_after(expr, zone_name, now, 200)
    if not fires:
        raise CronProblem(f"'{expr}' never fires.")
    for earlier, later in zip(fires, fires[1:]):
        if (later - earlier).total_seconds() < min_interval:
            raise CronProblem(f"'{expr}' fires {int((later - earlier).total_seconds())} s apart (at "
                              f"{earlier.isoformat()} and {later.isoformat()}); schedules fire at most every "
                              f"{min_interval} s (SCHEDULE_MIN_INTERVAL_SECONDS).")


def utcnow():
    return datetime.now(timezone.utc)
