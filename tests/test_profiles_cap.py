"""The size cap of named profiles (PROFILE_MAX_BYTES), in a module of its own: its worker has a cap of 100 bytes, and
no other worker may take its task."""
import pytest

from tests.conftest import WorkerProcess
from tests.test_profiles import SIGNED_OUT, actions, check, listing, sign_in, site  # noqa: F401  (site: a fixture)

pytestmark = pytest.mark.slow


def test_a_state_over_the_size_cap_is_not_saved_and_the_trace_says_so(client, api_key, site):
    worker = WorkerProcess(queues="tasks", concurrency=1, env={"PROFILE_MAX_BYTES": "100"}, name="cap")
    try:
        done = sign_in(client, api_key, site, {"name": "big", "persist": True})
        assert any("profile 'big' not saved: its state is" in a and "over PROFILE_MAX_BYTES (100)" in a
                   for a in actions(done)), actions(done)
        assert listing(client, api_key)["big"]["size"] == 0
        assert check(client, api_key, site, {"name": "big"}) == SIGNED_OUT
    finally:
        worker.stop()
