"""The outbound-URL guard's exception and submit-time check; app.egress is the one outbound path."""
# Cloud metadata endpoints are link-local or private already; listed for clarity of intent.
METADATA_HOSTS = {"metadata.google.internal", "metadata", "instance-data"}


class UnsafeUrl(ValueError):
    """The URL is malformed, or it resolves to an address a caller must not reach through us."""


def check_url(url, *, allow_private=False, schemes=("http", "https")):
    """Resolve `url`'s host and return its checked addresses; raise UnsafeUrl unless all are public.

    Kept for callers that only need a yes/no at submit time; anything that connects goes through
    app.egress, which makes the connection to these very addresses.
    """
    from .egress import Policy

    return list(Policy(allow_private=allow_private).check_url(url, schemes).addresses)
