"""The outbound-URL guard refuses private, loopback, link-local and metadata addresses."""
import pytest

from app.netguard import UnsafeUrl, check_url


@pytest.mark.parametrize("url, reason", [
    ("https://127.0.0.1/hook", "non-public address (127.0.0.1)"),
    ("https://localhost/hook", "non-public address"),
    ("https://10.1.2.3/", "non-public address (10.1.2.3)"),
    ("https://192.168.0.10/", "non-public address"),
    ("https://169.254.169.254/latest/meta-data", "non-public address (169.254.169.254)"),
    ("https://[::1]/", "non-public address (::1)"),
    ("https://[::ffff:127.0.0.1]/", "embeds an IPv4 address"),
    ("https://100.64.0.1/", "non-public address"),
    ("https://0.0.0.0/", "non-public address"),
    ("ftp://example.com/", "scheme must be"),
    ("https:///nohost", "no host"),
    ("https://no-such-host.invalid/", "cannot resolve"),
])
def test_refuses(url, reason):
    with pytest.raises(UnsafeUrl, match=reason.replace("(", r"\(").replace(")", r"\)")):
        check_url(url)


def test_public_literal_address_passes():
    assert check_url("https://93.184.216.34/hook") == ["93.184.216.34"]


def test_private_addresses_pass_when_allowed():
    assert check_url("https://127.0.0.1:8443/hook", allow_private=True) == ["127.0.0.1"]


def test_https_only_when_asked():
    with pytest.raises(UnsafeUrl, match="scheme must be https"):
        check_url("http://93.184.216.34/", schemes=("https",))
